#include "chapters/03_paged_blocks/pool_map.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "base/error.hpp"

namespace kvheap::ch03 {

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
