#include "chapters/03_paged_blocks/pool_report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ostream.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "base/error.hpp"

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

namespace {
// "#rrggbb" of a hue (degrees) at fixed saturation and the given lightness; spelled out because
// not every SVG renderer understands hsl().
std::string hue_color(double hue, double lightness) {
  const double s = 0.65, l = lightness;
  const double c = (1.0 - std::fabs(2.0 * l - 1.0)) * s;
  const double hp = hue / 60.0;
  const double x = c * (1.0 - std::fabs(std::fmod(hp, 2.0) - 1.0));
  double r = 0, g = 0, b = 0;
  if (hp < 1)
    r = c, g = x;
  else if (hp < 2)
    r = x, g = c;
  else if (hp < 3)
    g = c, b = x;
  else if (hp < 4)
    g = x, b = c;
  else if (hp < 5)
    r = x, b = c;
  else
    r = c, b = x;
  const double m = l - c / 2.0;
  auto byte = [&](double v) { return static_cast<int>(std::lround((v + m) * 255.0)); };
  return fmt::format("#{:02x}{:02x}{:02x}", byte(r), byte(g), byte(b));
}
}  // namespace

void write_pool_map(const BlockManager& m, const std::string& path, const std::string& title) {
  const BlockPool& pool = m.pool();
  const int n = pool.num_blocks();
  const int bs = pool.block_size();
  // owner[b] = sequence id and fill[b] = used slots of block b, from the page tables.
  std::vector<int> owner(n, -1), fill(n, 0);
  for (int seq : m.live_sequences()) {
    const auto& pages = m.page_table(seq);
    const int len = m.length(seq);
    for (std::size_t i = 0; i < pages.size(); ++i) {
      owner[pages[i]] = seq;
      fill[pages[i]] = std::clamp(len - static_cast<int>(i) * bs, 0, bs);
    }
  }
  const int cols = std::max(1, static_cast<int>(std::ceil(std::sqrt(n * 2.0))));
  const int rows = (n + cols - 1) / cols;
  const int cell = std::clamp(720 / cols, 4, 24);
  const int top = 28;
  std::ofstream f(path);
  if (!f) throw InputError(fmt::format("--pool-map: cannot write '{}'", path));
  fmt::print(
      f,
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' "
      "font-size='13'>\n<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='4' y='18'>{}: {} blocks x {} slots, {} used, {} free</text>\n",
      cols * cell + 8, rows * cell + top + 8, title, n, bs, pool.num_used(), pool.num_free());
  for (int b = 0; b < n; ++b) {
    const int x = 4 + (b % cols) * cell, y = top + (b / cols) * cell;
    fmt::print(f, "<rect x='{}' y='{}' width='{}' height='{}' fill='#e8e8e8' stroke='white'/>\n", x,
               y, cell, cell);
    if (owner[b] < 0) continue;
    // Golden-angle hues keep neighbouring sequence ids visibly different.
    const double hue = std::fmod(owner[b] * 137.508, 360.0);
    const int h = std::max(1, cell * fill[b] / bs);
    fmt::print(f,
               "<rect x='{}' y='{}' width='{}' height='{}' fill='{}' stroke='white'/>\n"
               "<rect x='{}' y='{}' width='{}' height='{}' fill='{}'>"
               "<title>block {}: sequence {}, {}/{} slots</title></rect>\n",
               x, y, cell, cell, hue_color(hue, 0.85), x, y + cell - h, cell, h,
               hue_color(hue, 0.45), b, owner[b], fill[b], bs);
  }
  f << "</svg>\n";
  f.close();  // a write that failed (a full disk) shows only once the file is flushed
  if (!f)
    throw ResourceError(
        fmt::format("--pool-map: cannot write '{}': {}", path, std::strerror(errno)));
}

}  // namespace kvheap::ch03
