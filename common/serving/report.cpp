#include "common/serving/report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ostream.h>

#include <algorithm>
#include <ostream>

namespace kvheap {

std::size_t weight_bytes_per_decode_step(const ModelConfig& c, DType w) {
  std::size_t params = static_cast<std::size_t>(c.num_parameters());
  const std::size_t table = static_cast<std::size_t>(c.vocab_size) * c.dim;
  if (!c.tied_embeddings) params -= table;  // the separate classifier is read; the table is not
  return (params + c.dim) * dtype_size(w);  // + the one gathered embedding row
}

double matmul_flops_per_row(const ModelConfig& c) {
  double params = static_cast<double>(c.num_parameters());
  if (!c.tied_embeddings) params -= static_cast<double>(c.vocab_size) * c.dim;  // the gather
  params -= static_cast<double>(2 * c.n_layers + 1) * c.dim;                    // the norms
  return 2.0 * params;
}

double pass_flops(const ModelConfig& c, double rows, double logit_rows, double positions_attended) {
  const double classifier = 2.0 * c.vocab_size * static_cast<double>(c.dim);
  const double attention = 4.0 * c.n_layers * c.n_heads * static_cast<double>(c.head_dim);
  return rows * (matmul_flops_per_row(c) - classifier) + logit_rows * classifier +
         positions_attended * attention;
}

double RunReport::matmul_gflops() const {
  const double sec = pass_seconds();
  return sec > 0
             ? matmul_flops_per_row * static_cast<double>(prefill_rows + decode_rows) / sec / 1e9
             : 0;
}

namespace {

/// Each pass's two roofline times, bytes at the read peak and flops at the FMA peak, given to
/// f(bytes_s, flops_s); nothing unless both peaks were measured.
template <class F>
void for_each_pass_roof(const RunReport& r, F&& f) {
  if (r.peak.gbps <= 0 || r.peak.gflops <= 0) return;
  const double bytes_s = r.step_bytes() / (r.peak.gbps * 1e9);
  for (const int rows : r.pass_rows)
    f(bytes_s, r.matmul_flops_per_row * rows / (r.peak.gflops * 1e9));
}

}  // namespace

double RunReport::roofline_seconds() const {
  double sum = 0;
  for_each_pass_roof(*this,
                     [&](double bytes_s, double flops_s) { sum += std::max(bytes_s, flops_s); });
  return sum;
}

long RunReport::passes_bound_by_bytes() const {
  long n = 0;
  for_each_pass_roof(*this, [&](double bytes_s, double flops_s) { n += bytes_s >= flops_s; });
  return n;
}

double RunReport::prefill_tokens_per_s() const {
  return prefill_seconds > 0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0;
}

double RunReport::decode_tokens_per_s() const {
  return decode_seconds > 0 ? decode_tokens / decode_seconds : 0;
}

double RunReport::rows_per_s() const {
  return seconds > 0 ? static_cast<double>(prefill_rows + decode_rows) / seconds : 0;
}

double RunReport::decode_gbps() const {
  if (decode_seconds <= 0) return 0;
  return step_bytes() * static_cast<double>(decode_steps) / decode_seconds / 1e9;
}

double RunReport::waste_fraction() const {
  return kv_reserved_bytes > 0
             ? 1.0 - static_cast<double>(kv_used_bytes) / static_cast<double>(kv_reserved_bytes)
             : 0.0;
}

double RunReport::prefix_hit_rate() const {
  const double needed = static_cast<double>(counters.positions_reused + prefill_rows);
  return needed > 0 ? static_cast<double>(counters.positions_reused) / needed : 0.0;
}

double RunReport::output_tokens_per_s() const {
  return seconds > 0 ? static_cast<double>(generated_tokens) / seconds : 0;
}

RunReport make_report(const ServeResult& result, const std::vector<Request>& requests,
                      const ModelConfig& c, DType kv, bool whole_run) {
  RunReport r;
  r.model = c.name;
  r.kv_dtype = kv;
  r.whole_run = whole_run;
  r.requests = static_cast<int>(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const RequestRecord& rec = result.requests[i];
    if (rec.status == "not admitted") {
      ++r.not_admitted;
      continue;
    }
    if (requests[i].fork_of < 0) r.prompt_tokens += static_cast<long>(requests[i].prompt.size());
  }
  r.generated_tokens = result.generated_tokens();
  if (requests.size() == 1) r.stop_reason = result.requests[0].status;
  r.passes = result.passes;
  r.prefill_passes = result.prefill_passes;
  r.prefill_rows = result.prefill_rows;
  r.decode_rows = result.decode_rows;
  r.peak_running = result.peak_running;
  r.prefill_seconds = result.prefill_seconds;
  r.seconds = result.seconds;
  // Napkin math: each decode step reads K and V of every position its rows attend to, in every
  // layer (a shared prefix once, where the cache reads it once).
  const double per_position = static_cast<double>(kv_bytes_per_token(c, kv));
  if (whole_run) {
    r.decode_seconds = result.prefill_seconds + result.decode_seconds;  // in passes, not waiting
    r.decode_steps = result.passes;
    r.decode_tokens = static_cast<double>(r.generated_tokens);
    r.kv_bytes_per_step =
        result.passes > 0 ? result.positions_read * per_position / result.passes : 0.0;
  } else {
    r.decode_seconds = result.decode_seconds;
    r.decode_steps = result.decode_passes();
    r.decode_tokens = static_cast<double>(result.decode_rows);
    r.kv_bytes_per_step =
        r.decode_steps > 0 ? result.decode_positions_read * per_position / r.decode_steps : 0.0;
  }
  r.kv_reserved_bytes = result.peak.reserved;
  r.kv_used_bytes = result.peak.used;
  r.matmul_flops_per_row = matmul_flops_per_row(c);
  r.pass_rows.reserve(result.timeline.size());
  for (const StepSample& t : result.timeline) r.pass_rows.push_back(t.rows);
  r.phases = result.phases;
  r.device_timed = result.device_timed;
  r.latency = latencies(result);
  r.counters = result.counters;
  r.requests_served = r.requests - r.not_admitted;
  return r;
}

void print_report(const RunReport& r, std::ostream& os) {
  fmt::print(os, "kvheap {} | model {} | {} | weights {} | KV {}", r.chapter, r.model, r.device,
             dtype_name(r.weight_dtype), dtype_name(r.kv_dtype));
  if (r.kv_budget_bytes > 0) fmt::print(os, " | budget {:.3f} MB", r.kv_budget_bytes / 1e6);
  fmt::print(os, "\n");
  if (!r.products.empty())
    fmt::print(os, "  weight products: {} (weights made ready in {:.3f} s)\n", r.products,
               r.weight_setup_seconds);
  fmt::print(os, "  requests: {} served", r.requests - r.not_admitted);
  if (r.not_admitted > 0) fmt::print(os, ", {} not admitted", r.not_admitted);
  fmt::print(os, ", at most {} at once; {} forward passes, {} rows ({} prompt, {} decode)\n",
             r.peak_running, r.passes, r.prefill_rows + r.decode_rows, r.prefill_rows,
             r.decode_rows);
  if (r.whole_run) {
    fmt::print(os,
               "  run     : {:6d} passes in {:9.3f} ms  = {:10.1f} generated tokens/s, "
               "{:.1f} rows/s\n",
               r.decode_steps, r.decode_seconds * 1e3, r.decode_tokens_per_s(), r.rows_per_s());
  } else {
    fmt::print(os, "  prefill : {:6d} tokens in {:9.3f} ms  = {:10.1f} tokens/s\n", r.prompt_tokens,
               r.prefill_seconds * 1e3, r.prefill_tokens_per_s());
    fmt::print(os, "  decode  : {:6d} steps  in {:9.3f} ms  = {:10.1f} tokens/s", r.decode_steps,
               r.decode_seconds * 1e3, r.decode_tokens_per_s());
    if (!r.stop_reason.empty()) fmt::print(os, "  (stop: {})", r.stop_reason);
    fmt::print(os, "\n");
  }
  const auto ms = [](const Distribution& d) {
    return fmt::format("p50 {:.1f} / p90 {:.1f} / p99 {:.1f} ms", d.p50 * 1e3, d.p90 * 1e3,
                       d.p99 * 1e3);
  };
  fmt::print(os, "  latency : TTFT {}; TPOT {}\n", ms(r.latency.ttft), ms(r.latency.tpot));
  fmt::print(os, "            queueing {}; {:.1f} requests/s, {:.1f} output tokens/s\n",
             ms(r.latency.queueing), r.seconds > 0 ? r.requests_served / r.seconds : 0.0,
             r.output_tokens_per_s());
  if (r.counters.preemptions > 0 || r.counters.positions_reused > 0)
    fmt::print(os, "  reuse   : {} preemptions; prefix hit rate {:.1f} % ({} prompt positions)\n",
               r.counters.preemptions, 100.0 * r.prefix_hit_rate(), r.counters.positions_reused);
  fmt::print(os, "  KV cache: reserved {:.3f} MB, used {:.3f} MB, waste {:.1f} %\n",
             r.kv_reserved_bytes / 1e6, r.kv_used_bytes / 1e6, 100.0 * r.waste_fraction());
  fmt::print(os,
             "  bytes/decode step: weights {:.3f} MB (read once for all its rows) + KV {:.3f} "
             "MB (average)\n",
             r.weight_bytes_per_step / 1e6, r.kv_bytes_per_step / 1e6);
  print_achieved(r.peak, r.decode_gbps(), r.step_bytes(), os, r.matmul_gflops());
  if (const double roof = r.roofline_seconds(); roof > 0 && r.pass_seconds() > 0)
    fmt::print(os,
               "  roofline: max(bytes / read peak, flops / FMA peak) is {:.3f} ms a pass; the "
               "passes took {:.3f} ms, {:.2f} of the roofline; {} of {} bound by bytes\n",
               1e3 * roof / r.passes, 1e3 * r.pass_seconds() / r.passes, roof / r.pass_seconds(),
               r.passes_bound_by_bytes(), r.pass_rows.size());
  if (r.products.find("vdpbf16ps") != std::string::npos && r.peak.gflops > 0)
    fmt::print(os,
               "  (bf16 pairs: vdpbf16ps does two products a lane per instruction, so their rate "
               "can pass the fp32 FMA peak, and the passes the roofline drawn from it)\n");
  print_phases(r, os);
}

void print_phases(const RunReport& r, std::ostream& os) {
  if (r.passes <= 0) return;
  const PhaseTimes& p = r.phases;
  const double per = 1e3 / static_cast<double>(r.passes);
  fmt::print(os,
             "  phases  : per pass {:.3f} ms = scheduling {:.3f} + prepare {:.3f} + forward "
             "{:.3f} + sampling {:.3f} + recording {:.3f} + other {:.3f} ms{}\n",
             p.wall * per, p.schedule * per, p.prepare * per, p.forward * per, p.sample * per,
             p.record * per, p.other() * per,
             r.device_timed ? " (forward and sampling: device time, from events)" : "");
}

nlohmann::json phases_json(const RunReport& r) {
  const PhaseTimes& p = r.phases;
  const double per = r.passes > 0 ? 1e3 / static_cast<double>(r.passes) : 0.0;
  return {{"schedule_s", p.schedule},
          {"prepare_s", p.prepare},
          {"forward_s", p.forward},
          {"sample_s", p.sample},
          {"record_s", p.record},
          {"other_s", p.other()},
          {"wall_s", p.wall},
          {"device_timed", r.device_timed},
          {"per_pass_ms",
           {{"schedule", p.schedule * per},
            {"prepare", p.prepare * per},
            {"forward", p.forward * per},
            {"sample", p.sample * per},
            {"record", p.record * per},
            {"other", p.other() * per},
            {"wall", p.wall * per}}}};
}

void print_achieved(const MeasuredPeak& peak, double gbps, double step_bytes, std::ostream& os,
                    double gflops) {
  if (peak.gbps <= 0) {
    fmt::print(os, "  achieved {:.2f} GB/s\n", gbps);
  } else {
    fmt::print(os, "  achieved {:.2f} GB/s = {:.1f} % of the {} peak measured now ({:.2f} GB/s)\n",
               gbps, 100.0 * gbps / peak.gbps, peak.kind, peak.gbps);
    if (peak.partly_cached(step_bytes))
      fmt::print(os, "  (this step reads {:.1f} MB: {})\n", step_bytes / 1e6,
                 peak.cached_note("step"));
  }
  if (gflops <= 0) return;
  fmt::print(os, "  matmul  : {:.1f} GFLOP/s over every pass", gflops);
  if (peak.gflops > 0)
    fmt::print(os, " = {:.1f} % of the fp32 multiply-add peak measured now ({:.1f} GFLOP/s)",
               100.0 * gflops / peak.gflops, peak.gflops);
  fmt::print(os, "\n");
}

namespace {

// The keys that "metrics" and "serving" both carry, written in one place.
nlohmann::json shared_keys(const RunReport& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"generated_tokens", r.generated_tokens},
          {"kv_budget_bytes", r.kv_budget_bytes},
          {"kv_reserved_bytes", r.kv_reserved_bytes},
          {"kv_used_bytes", r.kv_used_bytes},
          {"weight_bytes_per_step", r.weight_bytes_per_step},
          {"kv_bytes_per_step", r.kv_bytes_per_step},
          {"peak_gbps", r.peak.gbps}};
}

nlohmann::json distribution_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}};
}

}  // namespace

nlohmann::json metrics_json(const RunReport& r) {
  nlohmann::json m = shared_keys(r);
  m.update({{"decode_seconds", r.decode_seconds},
            {"decode_steps", r.decode_steps},
            {"decode_tokens_per_s", r.decode_tokens_per_s()},
            {"rows_per_s", r.rows_per_s()},
            {"kv_waste_fraction", r.waste_fraction()},
            {"decode_gbps", r.decode_gbps()},
            {"peak_kind", r.peak.kind},
            {"peak_cache_bytes", r.peak.cache_bytes},
            {"step_partly_cached", r.peak.partly_cached(r.step_bytes())},
            {"cache_note", r.peak.partly_cached(r.step_bytes()) ? r.peak.cached_note("step") : ""},
            {"device", r.device},
            {"weight_dtype", dtype_name(r.weight_dtype)},
            {"weight_products", r.products},
            {"weight_setup_s", r.weight_setup_seconds},
            {"kv_dtype", dtype_name(r.kv_dtype)}});
  if (!r.whole_run) {  // a continuous batcher has no prefill phase and no single stop
    m["stop_reason"] = r.stop_reason;
    m["prefill_seconds"] = r.prefill_seconds;
    m["prefill_tokens_per_s"] = r.prefill_tokens_per_s();
  }
  return m;
}

nlohmann::json serving_json(const RunReport& r) {
  const double req_per_s = r.seconds > 0 ? static_cast<double>(r.requests_served) / r.seconds : 0;
  nlohmann::json s = shared_keys(r);
  s.update({{"requests", r.requests},
            {"not_admitted", r.not_admitted},
            {"peak_running", r.peak_running},
            {"passes", r.passes},
            {"prefill_passes", r.prefill_passes},
            {"prefill_rows", r.prefill_rows},
            {"decode_rows", r.decode_rows},
            {"seconds", r.seconds},
            {"generated_tokens_per_s", r.output_tokens_per_s()},
            {"requests_per_s", req_per_s},
            {"ttft_s", distribution_json(r.latency.ttft)},
            {"tpot_s", distribution_json(r.latency.tpot)},
            {"itl_s", distribution_json(r.latency.itl)},
            {"queueing_s", distribution_json(r.latency.queueing)},
            {"preemptions", r.counters.preemptions},
            {"prompt_positions_reused", r.counters.positions_reused},
            {"prefix_hit_rate", r.prefix_hit_rate()},
            {"gbps", r.decode_gbps()},
            {"fraction_of_peak", r.peak.gbps > 0 ? r.decode_gbps() / r.peak.gbps : 0.0},
            {"matmul_flops_per_row", r.matmul_flops_per_row},
            {"matmul_gflops", r.matmul_gflops()},
            {"peak_gflops", r.peak.gflops},
            {"fraction_of_fma_peak", r.peak.gflops > 0 ? r.matmul_gflops() / r.peak.gflops : 0.0},
            {"roofline_s", r.roofline_seconds()},
            {"fraction_of_roofline",
             r.pass_seconds() > 0 ? r.roofline_seconds() / r.pass_seconds() : 0.0},
            {"passes_bound_by_bytes", r.passes_bound_by_bytes()},
            {"phases", phases_json(r)}});
  return s;
}

nlohmann::json timeline_json(const std::vector<StepSample>& timeline) {
  nlohmann::json step = nlohmann::json::array(), seconds = nlohmann::json::array(),
                 running = nlohmann::json::array(), rows = nlohmann::json::array(),
                 held = nlohmann::json::array(), cached = nlohmann::json::array(),
                 free = nlohmann::json::array(), used = nlohmann::json::array(),
                 schedule = nlohmann::json::array(), prepare = nlohmann::json::array(),
                 forward = nlohmann::json::array(), sample = nlohmann::json::array(),
                 record = nlohmann::json::array(), wall = nlohmann::json::array();
  for (const StepSample& s : timeline) {
    step.push_back(s.step);
    seconds.push_back(s.seconds);
    running.push_back(s.running);
    rows.push_back(s.rows);
    held.push_back(s.kv.held);
    cached.push_back(s.kv.cached);
    free.push_back(s.kv.free);
    used.push_back(s.kv_used);
    schedule.push_back(s.phases.schedule);
    prepare.push_back(s.phases.prepare);
    forward.push_back(s.phases.forward);
    sample.push_back(s.phases.sample);
    record.push_back(s.phases.record);
    wall.push_back(s.phases.wall);
  }
  return {{"step", step},          {"seconds", seconds},    {"running", running},
          {"rows", rows},          {"kv_held_bytes", held}, {"kv_cached_bytes", cached},
          {"kv_free_bytes", free}, {"kv_used_bytes", used}, {"schedule_s", schedule},
          {"prepare_s", prepare},  {"forward_s", forward},  {"sample_s", sample},
          {"record_s", record},    {"wall_s", wall}};
}

std::string json_line(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvheap
