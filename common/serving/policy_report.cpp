#include "common/serving/policy_report.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include <ostream>

#include "common/cache/read_once_cost.hpp"

namespace kvheap {

// The JSON objects' keys are the fields' names.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(PoolStats, blocks_total, blocks_used, blocks_free, block_size,
                                   sequences, largest_page_table, tokens, slots_held,
                                   bytes_per_token, reservation_slots)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SharingStats, block_size, blocks_total, prompt_positions,
                                   prompt_positions_reused, blocks_held, blocks_referenced, forks,
                                   copies_on_write, evictions, read_once, priced, groups_planned,
                                   groups_read_once, pricing_seconds)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SchedulerCounters, steps, admissions, preemptions, decode_rows,
                                   prefill_rows, recomputed_rows, positions_reused, peak_running)

// "scheduler": the counters and the limits, in one object (static: found by argument-dependent
// lookup, which an unnamed namespace would hide).
static void to_json(nlohmann::json& j, const SchedulerStats& s) {
  j = s.counters;
  j["max_batch_tokens"] = s.max_batch_tokens;
  j["max_running"] = s.max_running;
  j["block_size"] = s.block_size;
  j["blocks_total"] = s.blocks_total;
}

namespace {

void print_paging(const PagingStats& s, std::ostream& os) {
  fmt::print(os, "  block size {}, {} blocks cut from the budget\n", s.pool.block_size,
             s.num_blocks);
  print_pool_stats(s.pool, os);
  fmt::print(os,
             "  sequences that fit the budget: {} reserving max_seq_len, {} paged (at this run's "
             "average of {:.1f} blocks per sequence)\n",
             s.fit_contiguous, s.fit_paged > 0 ? fmt::format("about {}", s.fit_paged) : "n/a",
             s.blocks_per_seq);
}

// What decode steps would read if every row read its whole context, shared positions each time.
double unshared_bytes_per_step(const ServeResult& r, std::size_t bytes_per_token) {
  return r.decode_passes() > 0
             ? r.decode_positions_unshared * static_cast<double>(bytes_per_token) /
                   static_cast<double>(r.decode_passes())
             : 0.0;
}

// What decode steps read of each shared level, on average (top level first).
std::vector<double> level_bytes_per_step(const ServeResult& r, std::size_t bytes_per_token) {
  std::vector<double> out;
  if (r.decode_passes() == 0) return out;
  for (double positions : r.decode_level_positions_read)
    out.push_back(positions * static_cast<double>(bytes_per_token) /
                  static_cast<double>(r.decode_passes()));
  return out;
}

void print_sharing(const SharingStats& s, const ServeResult& r, std::size_t bytes_per_token,
                   std::ostream& os) {
  fmt::print(os,
             "  computed once: {} of {} prompt positions computed, {} taken from the prefix "
             "index, in {} prefill passes\n",
             s.prompt_positions - s.prompt_positions_reused, s.prompt_positions,
             s.prompt_positions_reused, r.prefill_passes);
  fmt::print(os,
             "  stored once  : {} blocks of {} held where unshared page tables would hold {} "
             "({:.1f} %); {} forks, {} copies on write, {} evictions\n",
             s.blocks_held, s.block_size, s.blocks_referenced,
             s.blocks_referenced > 0 ? 100.0 * s.blocks_held / s.blocks_referenced : 0.0, s.forks,
             s.copies_on_write, s.evictions);
  fmt::print(os,
             "  read once    : KV read per decode step {:.3f} MB where every row reading its "
             "whole context reads {:.3f} MB{}\n",
             r.decode_passes() > 0
                 ? r.decode_positions_read * static_cast<double>(bytes_per_token) /
                       static_cast<double>(r.decode_passes()) / 1e6
                 : 0.0,
             unshared_bytes_per_step(r, bytes_per_token) / 1e6,
             s.read_once ? "" : " (--read-once never: the same)");
  if (s.priced)
    fmt::print(os,
               "                 {} of {} groups of rows that share a prefix read it once (summed "
               "over the passes); for the others the cost model, its rates measured in {:.3f} s at "
               "start, priced plain attention within {:.0f} % of reading once, or below\n",
               s.groups_read_once, s.groups_planned, s.pricing_seconds, 100 * kReadOnceMargin);
  const std::vector<double> levels = level_bytes_per_step(r, bytes_per_token);
  if (!levels.empty()) {
    fmt::print(os, "                 of which shared levels, each read once:");
    for (std::size_t l = 0; l < levels.size(); ++l)
      fmt::print(os, "{} level {} {:.3f} MB", l > 0 ? "," : "", l + 1, levels[l] / 1e6);
    fmt::print(os, "\n");
  }
}

void print_scheduler(const SchedulerStats& s, const ServeResult& r, std::ostream& os) {
  const SchedulerCounters& k = s.counters;
  const double steps = static_cast<double>(k.steps);
  const long rows = k.decode_rows + k.prefill_rows;
  fmt::print(os,
             "  steps     : {} forward passes of at most {} rows: {} decode rows, {} prefill rows "
             "({} recomputed after preemption), {:.1f} rows per pass\n",
             k.steps, s.max_batch_tokens, k.decode_rows, k.prefill_rows, k.recomputed_rows,
             steps > 0 ? rows / steps : 0.0);
  fmt::print(os,
             "  admission : up to {} requests running at once (limit {}); {} admissions, {} "
             "preemptions; {} positions taken from the prefix index\n",
             k.peak_running, s.max_running, k.admissions, k.preemptions, k.positions_reused);
  fmt::print(os,
             "  memory    : running requests' KV at most {:.3f} MB ({:.3f} MB of blocks held "
             "then), block size {}, {} blocks; finished requests' blocks kept in the prefix "
             "index: up to {:.3f} MB\n",
             r.peak.used / 1e6, r.peak.reserved / 1e6, s.block_size, s.blocks_total,
             r.peak_cached / 1e6);
  const long generated = r.generated_tokens();
  fmt::print(os,
             "  weights   : read once per pass for all its rows: {:.2f} passes per generated token "
             "(one request at a time: 1 or more)\n",
             generated > 0 ? static_cast<double>(r.passes) / generated : 0.0);
}

}  // namespace

void print_pool_stats(const PoolStats& s, std::ostream& os) {
  const double mb = static_cast<double>(s.bytes_per_token) / 1e6;
  fmt::print(os, "  block pool: {} blocks x {} slots = {:.3f} MB\n", s.blocks_total, s.block_size,
             s.blocks_total * static_cast<double>(s.block_size) * mb);
  fmt::print(os,
             "    in use  : {:6d} blocks  {:10.3f} MB   ({} sequences, longest page table {} "
             "blocks)\n",
             s.blocks_used, s.slots_held * mb, s.sequences, s.largest_page_table);
  fmt::print(os, "    free    : {:6d} blocks  {:10.3f} MB\n", s.blocks_free,
             s.blocks_free * static_cast<double>(s.block_size) * mb);
  fmt::print(os,
             "    tokens  : {:6d}         {:10.3f} MB   tail waste {:.2f} % (unused slots of "
             "last blocks)\n",
             s.tokens, s.tokens * mb, 100.0 * s.tail_waste());
  fmt::print(os, "  max_seq_len reservation for the same sequences: {:.3f} MB, waste {:.2f} %\n",
             s.reservation_slots * mb, 100.0 * s.reservation_waste());
}

nlohmann::json pool_stats_json(const PoolStats& s) {
  nlohmann::json j = s;
  j["tail_waste_fraction"] = s.tail_waste();
  j["reservation_waste_fraction"] = s.reservation_waste();
  return j;
}

void print_policy_stats(const PolicyStats& s, const ServeResult& result,
                        std::size_t bytes_per_token, std::ostream& os) {
  if (s.paging) print_paging(*s.paging, os);
  if (s.sharing) print_sharing(*s.sharing, result, bytes_per_token, os);
  if (s.scheduler) print_scheduler(*s.scheduler, result, os);
}

void add_policy_json(const PolicyStats& s, const ServeResult& result, std::size_t bytes_per_token,
                     nlohmann::json& root) {
  if (s.paging) {
    root["pool"] = pool_stats_json(s.paging->pool);
    root["metrics"]["sequences_fit_contiguous"] = s.paging->fit_contiguous;
    // null when nothing was stored: no average to extrapolate from
    root["metrics"]["sequences_fit_paged"] =
        s.paging->fit_paged > 0 ? nlohmann::json(s.paging->fit_paged) : nlohmann::json();
  }
  if (s.sharing) {
    root["sharing"] = *s.sharing;
    root["sharing"]["kv_bytes_per_step_unshared"] =
        unshared_bytes_per_step(result, bytes_per_token);
    root["sharing"]["kv_bytes_per_step_by_level"] = level_bytes_per_step(result, bytes_per_token);
  }
  if (s.scheduler) {
    root["scheduler"] = *s.scheduler;
    root["metrics"]["kv_cached_peak_bytes"] = result.peak_cached;
  }
}

void add_request_json(const RequestStats& r, nlohmann::json& entry) {
  if (r.prompt) entry["request"] = *r.prompt;
  if (r.prompt_tokens_reused) entry["prompt_tokens_reused"] = *r.prompt_tokens_reused;
  if (r.preemptions) entry["preemptions"] = *r.preemptions;
}

std::string describe_request(const RequestStats& r) {
  std::string out;
  if (r.prompt)
    out += fmt::format(" (prompt {}, {} prompt tokens from the cache)", *r.prompt,
                       r.prompt_tokens_reused.value_or(0));
  if (r.preemptions) out += fmt::format(", {} preemptions", *r.preemptions);
  return out;
}

}  // namespace kvheap
