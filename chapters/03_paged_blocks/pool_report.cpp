#include "chapters/03_paged_blocks/pool_report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ostream.h>

#include <algorithm>

namespace kvheap::ch03 {

double PoolStats::tail_waste() const {
  return slots_held > 0 ? 1.0 - static_cast<double>(tokens) / static_cast<double>(slots_held) : 0.0;
}

double PoolStats::reservation_waste() const {
  return reservation_slots > 0
             ? 1.0 - static_cast<double>(tokens) / static_cast<double>(reservation_slots)
             : 0.0;
}

PoolStats pool_stats(const BlockManager& m, const ModelConfig& c, DType kv) {
  PoolStats s;
  s.blocks_total = m.pool().num_blocks();
  s.blocks_used = m.pool().num_used();
  s.blocks_free = m.pool().num_free();
  s.block_size = m.pool().block_size();
  s.tokens = m.tokens_held();
  s.slots_held = m.slots_held();
  s.bytes_per_token = kv_bytes_per_token(c, kv);
  for (int seq : m.live_sequences()) {
    ++s.sequences;
    s.largest_page_table =
        std::max(s.largest_page_table, static_cast<int>(m.page_table(seq).size()));
  }
  s.reservation_slots = static_cast<std::size_t>(s.sequences) * c.max_seq_len;
  return s;
}

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
  return {{"blocks_total", s.blocks_total},
          {"blocks_used", s.blocks_used},
          {"blocks_free", s.blocks_free},
          {"block_size", s.block_size},
          {"sequences", s.sequences},
          {"largest_page_table", s.largest_page_table},
          {"tokens", s.tokens},
          {"slots_held", s.slots_held},
          {"bytes_per_token", s.bytes_per_token},
          {"tail_waste_fraction", s.tail_waste()},
          {"reservation_slots", s.reservation_slots},
          {"reservation_waste_fraction", s.reservation_waste()}};
}

}  // namespace kvheap::ch03
