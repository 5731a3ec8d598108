// What a chapter's program reports after a run, as a table for people and JSON for tools.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <iosfwd>
#include <string>

#include "common/bandwidth.hpp"
#include "common/generate.hpp"
#include "common/model_config.hpp"

namespace kvheap {

/// \brief Bytes of weights one decode step reads: every matrix once, plus one embedding row.
///
/// Napkin math: params x bytes/param, minus the embedding table (only one row is gathered)
/// unless it doubles as the classifier, which reads it whole.
std::size_t weight_bytes_per_decode_step(const ModelConfig& c, DType w);

/// \brief Measurements of one generation run.
struct DecodeReport {
  std::string chapter;                ///< e.g. "01_cpu_reference"
  std::string model;                  ///< model name from its config
  std::string device;                 ///< "cpu (2 threads)", "NVIDIA H200", ...
  DType weight_dtype = DType::F32;    ///< element type of the weights as read each step
  DType kv_dtype = DType::F32;        ///< element type of the KV cache
  GenerationResult run;               ///< tokens and timings
  std::size_t kv_reserved_bytes = 0;  ///< held by the cache policy at the end of the run
  std::size_t kv_used_bytes = 0;      ///< holding real tokens
  double weight_bytes_per_step = 0;   ///< weights read by one decode step
  double kv_bytes_per_step = 0;       ///< average over decode steps
  MeasuredPeak peak;                  ///< measured in the same process (gbps 0: not measured)

  /// \brief Prompt tokens per second of the prefill pass.
  [[nodiscard]] double prefill_tokens_per_s() const;
  /// \brief Decode steps per second.
  [[nodiscard]] double decode_tokens_per_s() const;
  /// \brief Bytes one decode step reads: weights plus KV.
  [[nodiscard]] double step_bytes() const { return weight_bytes_per_step + kv_bytes_per_step; }
  [[nodiscard]] double decode_gbps() const;  ///< step_bytes() x steps / time
  /// \brief 1 - used / reserved: the share of the cache's memory holding no token.
  [[nodiscard]] double waste_fraction() const;
};

/// \brief Fills the byte counts of `r` from its run, model and dtypes.
void fill_bytes(DecodeReport& r, const ModelConfig& c);

/// \brief Human-readable report (a few aligned lines).
void print_report(const DecodeReport& r, std::ostream& os);

/// \brief The report's "achieved" line: `gbps`, and its fraction of `peak` when one was measured.
/// When a step's `step_bytes` are under 4x the cache in front of the peak's memory, a second line
/// says that the rate is partly the cache's: with a small model on a CPU with a large L3 it can
/// exceed the memory's peak.
void print_achieved(const MeasuredPeak& peak, double gbps, double step_bytes, std::ostream& os);

/// \brief The "metrics" object of --json output.
nlohmann::json metrics_json(const DecodeReport& r);

/// \brief `j` as one line of JSON text. Strings that are not valid UTF-8 (decoded text cut
/// inside a multi-byte character, or byte tokens that never form one) get U+FFFD in place of
/// the bad bytes instead of aborting the output.
std::string json_line(const nlohmann::json& j);

class Tokenizer;

/// \brief Prints a finished run the way every chapter does: one JSON object (`json`) with
/// chapter, model, prompt_ids, generated_ids, text (when `tok` is given) and metrics; or the
/// model description, the generated text or ids, and the report.
void print_run(const DecodeReport& r, const ModelConfig& c, const Tokenizer* tok, bool json,
               std::ostream& os);

}  // namespace kvheap
