// What every chapter's program reports after a run, as text for people and JSON for tools: the
// same fields for every chapter, each computed the same way. A chapter leaves out what it does not
// have (a continuous batcher has no prefill phase) and adds its own lines (ServingPolicy).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

#include "common/measure/bandwidth.hpp"
#include "common/serving/latency.hpp"
#include "common/model/model_config.hpp"
#include "common/serving/serve.hpp"

namespace kvheap {

/// \brief Bytes of weights one decode step reads: every matrix once, plus one embedding row.
///
/// Napkin math: params x bytes/param, minus the embedding table (only one row is gathered)
/// unless it doubles as the classifier, which reads it whole.
std::size_t weight_bytes_per_decode_step(const ModelConfig& c, DType w);

/// \brief FLOPs of the matrix products one row of a pass computes: 2 per weight of every matrix
/// (the classifier included; the embedding gather and the norms are no products). Attention's
/// own FLOPs, 4 x n_heads x head_dim per position attended in each layer, are left out: under 3 %
/// of a row's for the presets' context lengths.
double matmul_flops_per_row(const ModelConfig& c);

/// \brief Flops of `rows` rows through the model: every weight matrix once per row, the classifier
/// only for the `logit_rows` that want logits, and attention's 4 x n_heads x head_dim per layer
/// for each of `positions_attended` (every row's position + 1, summed over the rows).
double pass_flops(const ModelConfig& c, double rows, double logit_rows, double positions_attended);

/// \brief The figures of one run.
///
/// Chapters 1-4 run a prefill phase (passes of prompt rows only) before decode passes, and the
/// decode figures count the decode passes. A continuous batcher (chapter 5) mixes both in every
/// pass (`whole_run`): every pass counts as decoding (time spent waiting for arrivals does not),
/// and its tokens are the generated ones.
struct RunReport {
  std::string chapter;              ///< e.g. "01_cpu_reference"
  std::string model;                ///< model name from its config
  std::string device;               ///< "cpu (2 threads)", "NVIDIA H200", ...
  DType weight_dtype = DType::F32;  ///< element type of the weights as read each step
  std::string products;             ///< how the weight products ran (Backend::products)
  double weight_setup_seconds =
      0;                        ///< packing (CPU) or uploading (GPU) the weights, before the run
  DType kv_dtype = DType::F32;  ///< element type of the KV cache
  bool whole_run = false;       ///< passes mix prompt and decode rows

  int requests = 0;            ///< requests given
  int not_admitted = 0;        ///< requests turned away
  long prompt_tokens = 0;      ///< prompt tokens of the requests served, a forked prompt once
  long generated_tokens = 0;   ///< tokens generated over all requests
  std::string stop_reason;     ///< why the one request stopped; "" when there are several
  long passes = 0;             ///< forward passes
  long prefill_passes = 0;     ///< passes without a decode row
  long prefill_rows = 0;       ///< prompt rows computed (recomputation included)
  long decode_rows = 0;        ///< rows that fed a sampled token
  int peak_running = 0;        ///< most requests holding memory at once
  double prefill_seconds = 0;  ///< time in prefill passes
  double decode_seconds = 0;   ///< time in decode passes (whole_run: in every pass)
  double seconds = 0;          ///< the whole run
  long decode_steps = 0;       ///< decode passes (whole_run: every pass)
  double decode_tokens = 0;    ///< decode rows (whole_run: generated tokens)

  std::size_t kv_budget_bytes = 0;    ///< the budget the policy worked in (0: no cap)
  std::size_t kv_reserved_bytes = 0;  ///< held at the pass that used the most
  std::size_t kv_used_bytes = 0;      ///< holding tokens at that pass
  double weight_bytes_per_step = 0;   ///< weights one pass reads, once for all its rows
  double kv_bytes_per_step = 0;       ///< KV one decode step reads, on average
  double matmul_flops_per_row = 0;    ///< matmul_flops_per_row() of the model
  MeasuredPeak peak;                  ///< measured in the same process (gbps 0: not measured)

  std::vector<int> pass_rows;  ///< rows of each forward pass, in order
  PhaseTimes phases;           ///< where the passes' time went, summed over the run
  bool device_timed = false;   ///< phases.forward and phases.sample are a GPU's device times

  Latencies latency;         ///< TTFT, TPOT, inter-token and queueing times
  PolicyCounters counters;   ///< preemptions and prompt positions taken from a prefix index
  long requests_served = 0;  ///< requests given minus those turned away

  /// \brief Prompt tokens per second of the prefill passes.
  [[nodiscard]] double prefill_tokens_per_s() const;
  /// \brief decode_tokens per second of decode time.
  [[nodiscard]] double decode_tokens_per_s() const;
  /// \brief Rows computed per second of the whole run.
  [[nodiscard]] double rows_per_s() const;
  /// \brief Bytes one decode step reads: weights plus KV.
  [[nodiscard]] double step_bytes() const { return weight_bytes_per_step + kv_bytes_per_step; }
  /// \brief step_bytes() x decode steps / decode time, in GB/s.
  [[nodiscard]] double decode_gbps() const;
  /// \brief Time spent in forward passes, prefill and decode.
  [[nodiscard]] double pass_seconds() const {
    return whole_run ? decode_seconds : prefill_seconds + decode_seconds;
  }
  /// \brief The matrix products' 1e9 FLOP/s over every row of every pass.
  [[nodiscard]] double matmul_gflops() const;
  /// \brief The passes' time at the roofline, in seconds: for each pass the larger of its
  /// bytes (the weights and the average step's KV) at the read peak and its products' flops
  /// (matmul_flops_per_row a row) at the multiply-add peak, summed. 0 unless both peaks were
  /// measured.
  [[nodiscard]] double roofline_seconds() const;
  /// \brief Passes whose bytes take longer at the read peak than their flops at the FMA peak.
  [[nodiscard]] long passes_bound_by_bytes() const;
  /// \brief 1 - used / reserved: the share of the cache's memory holding no token.
  [[nodiscard]] double waste_fraction() const;
  /// \brief Prompt positions taken from a prefix index over all prompt positions the run needed
  /// (taken or computed, recomputation after preemption included).
  [[nodiscard]] double prefix_hit_rate() const;
  /// \brief Generated tokens per second of the whole run.
  [[nodiscard]] double output_tokens_per_s() const;
};

/// \brief The report of a finished run of `requests`.
RunReport make_report(const ServeResult& result, const std::vector<Request>& requests,
                      const ModelConfig& c, DType kv, bool whole_run);

/// \brief The "metrics" object of --json output.
nlohmann::json metrics_json(const RunReport& r);

/// \brief The "serving" object of --json output: requests, passes and rows, throughput, latency
/// percentiles, preemptions and prefix hits, and KV, the same for every chapter.
nlohmann::json serving_json(const RunReport& r);

/// \brief The "timeline" object of --json output: one entry per forward pass in each array
/// (step, seconds, running, rows, kv_held_bytes, kv_cached_bytes, kv_free_bytes, and
/// kv_used_bytes: what of the held bytes holds a token; and the pass's phases: schedule_s,
/// prepare_s, forward_s, sample_s, record_s, wall_s).
nlohmann::json timeline_json(const std::vector<StepSample>& timeline);

/// \brief The "phases" object of --json's "serving": the run's time by phase (PhaseTimes), in
/// seconds in all and in milliseconds per pass, and whether forward and sample are device times.
nlohmann::json phases_json(const RunReport& r);

/// \brief The report's phase lines: where a pass's time went, per pass and in all.
void print_phases(const RunReport& r, std::ostream& os);

/// \brief The report's lines: header, prefill and decode, KV, bytes per step and achieved rate.
void print_report(const RunReport& r, std::ostream& os);

/// \brief The report's "achieved" line: `gbps`, and its fraction of `peak` when one was measured,
/// and the matrix products' `gflops` against the multiply-add peak when one was measured.
/// When a step's `step_bytes` are under 4x the cache in front of the peak's memory, a second line
/// says that the rate is partly the cache's: with a small model on a CPU with a large L3 it can
/// exceed the memory's peak.
void print_achieved(const MeasuredPeak& peak, double gbps, double step_bytes, std::ostream& os,
                    double gflops = 0.0);

/// \brief `j` as one line of JSON text. Strings that are not valid UTF-8 (decoded text cut
/// inside a multi-byte character, or byte tokens that never form one) get U+FFFD in place of
/// the bad bytes instead of aborting the output.
std::string json_line(const nlohmann::json& j);

}  // namespace kvheap
