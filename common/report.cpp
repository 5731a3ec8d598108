#include "common/report.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <ostream>

#include "common/tokenizer.hpp"

namespace kvheap {

std::size_t weight_bytes_per_decode_step(const ModelConfig& c, DType w) {
  std::size_t params = static_cast<std::size_t>(c.num_parameters());
  const std::size_t table = static_cast<std::size_t>(c.vocab_size) * c.dim;
  if (!c.tied_embeddings) params -= table;  // the separate classifier is read; the table is not
  return (params + c.dim) * dtype_size(w);  // + the one gathered embedding row
}

double DecodeReport::prefill_tokens_per_s() const {
  return run.prefill_seconds > 0 ? static_cast<double>(run.prompt.size()) / run.prefill_seconds : 0;
}

double DecodeReport::decode_tokens_per_s() const {
  return run.decode_seconds > 0 ? run.decode_steps / run.decode_seconds : 0;
}

double DecodeReport::decode_gbps() const {
  if (run.decode_seconds <= 0) return 0;
  return step_bytes() * run.decode_steps / run.decode_seconds / 1e9;
}

double DecodeReport::waste_fraction() const {
  return kv_reserved_bytes > 0
             ? 1.0 - static_cast<double>(kv_used_bytes) / static_cast<double>(kv_reserved_bytes)
             : 0.0;
}

void fill_bytes(DecodeReport& r, const ModelConfig& c) {
  r.weight_bytes_per_step = static_cast<double>(weight_bytes_per_decode_step(c, r.weight_dtype));
  // Each decode step reads K and V of every cached position in every layer.
  r.kv_bytes_per_step = r.run.decode_steps > 0
                            ? static_cast<double>(r.run.decode_context) *
                                  kv_bytes_per_token(c, r.kv_dtype) / r.run.decode_steps
                            : 0.0;
}

void print_report(const DecodeReport& r, std::ostream& os) {
  fmt::print(os, "kvheap {} | model {} | {} | weights {} | KV {}\n", r.chapter, r.model, r.device,
             dtype_name(r.weight_dtype), dtype_name(r.kv_dtype));
  fmt::print(os, "  prefill : {:6d} tokens in {:9.3f} ms  = {:10.1f} tokens/s\n",
             r.run.prompt.size(), r.run.prefill_seconds * 1e3, r.prefill_tokens_per_s());
  fmt::print(os, "  decode  : {:6d} steps  in {:9.3f} ms  = {:10.1f} tokens/s  (stop: {})\n",
             r.run.decode_steps, r.run.decode_seconds * 1e3, r.decode_tokens_per_s(),
             r.run.stop_reason);
  fmt::print(os, "  KV cache: reserved {:.3f} MB, used {:.3f} MB, waste {:.1f} %\n",
             r.kv_reserved_bytes / 1e6, r.kv_used_bytes / 1e6, 100.0 * r.waste_fraction());
  fmt::print(os, "  bytes/decode step: weights {:.3f} MB + KV {:.3f} MB (average)\n",
             r.weight_bytes_per_step / 1e6, r.kv_bytes_per_step / 1e6);
  print_achieved(r.peak, r.decode_gbps(), r.step_bytes(), os);
}

void print_achieved(const MeasuredPeak& peak, double gbps, double step_bytes, std::ostream& os) {
  if (peak.gbps <= 0) {
    fmt::print(os, "  achieved {:.2f} GB/s\n", gbps);
    return;
  }
  fmt::print(os, "  achieved {:.2f} GB/s = {:.1f} % of the {} peak measured now ({:.2f} GB/s)\n",
             gbps, 100.0 * gbps / peak.gbps, peak.kind, peak.gbps);
  if (peak.partly_cached(step_bytes))
    fmt::print(os, "  (this step reads {:.1f} MB: {})\n", step_bytes / 1e6,
               peak.cached_note("step"));
}

nlohmann::json metrics_json(const DecodeReport& r) {
  return {{"prompt_tokens", r.run.prompt.size()},
          {"generated_tokens", r.run.generated.size()},
          {"stop_reason", r.run.stop_reason},
          {"prefill_seconds", r.run.prefill_seconds},
          {"decode_seconds", r.run.decode_seconds},
          {"decode_steps", r.run.decode_steps},
          {"prefill_tokens_per_s", r.prefill_tokens_per_s()},
          {"decode_tokens_per_s", r.decode_tokens_per_s()},
          {"kv_reserved_bytes", r.kv_reserved_bytes},
          {"kv_used_bytes", r.kv_used_bytes},
          {"kv_waste_fraction", r.waste_fraction()},
          {"weight_bytes_per_step", r.weight_bytes_per_step},
          {"kv_bytes_per_step", r.kv_bytes_per_step},
          {"decode_gbps", r.decode_gbps()},
          {"peak_gbps", r.peak.gbps},
          {"peak_kind", r.peak.kind},
          {"peak_cache_bytes", r.peak.cache_bytes},
          {"step_partly_cached", r.peak.partly_cached(r.step_bytes())},
          {"cache_note", r.peak.partly_cached(r.step_bytes()) ? r.peak.cached_note("step") : ""},
          {"device", r.device},
          {"weight_dtype", dtype_name(r.weight_dtype)},
          {"kv_dtype", dtype_name(r.kv_dtype)}};
}

std::string json_line(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void print_run(const DecodeReport& r, const ModelConfig& c, const Tokenizer* tok, bool json,
               std::ostream& os) {
  if (json) {
    nlohmann::json j = {{"chapter", r.chapter},
                        {"model", c.name},
                        {"prompt_ids", r.run.prompt},
                        {"generated_ids", r.run.generated},
                        {"metrics", metrics_json(r)}};
    if (tok != nullptr) j["text"] = tok->decode(r.run.generated);
    os << json_line(j) << "\n";
    return;
  }
  os << describe(c) << "\n";
  if (tok != nullptr)
    os << "text: " << tok->decode(r.run.generated) << "\n";
  else
    fmt::print(os, "generated ids: {}\n", fmt::join(r.run.generated, ","));
  print_report(r, os);
}

}  // namespace kvheap
