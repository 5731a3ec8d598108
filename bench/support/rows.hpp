// The rows a benchmark program prints as its table once every benchmark has run. Google Benchmark
// may run a function more than once (a trial run first, or again while it sizes the iterations),
// so each configuration keeps only its last result.
#pragma once

#include <algorithm>
#include <vector>

namespace kvheap::bench {

/// \brief Adds `row` to `rows`, replacing the row that `same(old, row)` says it measures again.
template <class Row, class Same>
void keep_last(std::vector<Row>& rows, const Row& row, Same&& same) {
  const auto it =
      std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return same(r, row); });
  if (it != rows.end()) {
    *it = row;
  } else {
    rows.push_back(row);
  }
}

/// \brief Adds `row` to `rows`, replacing the row of the same `config` if there is one.
template <class Row>
void keep_last(std::vector<Row>& rows, const Row& row) {
  keep_last(rows, row, [](const Row& a, const Row& b) { return a.config == b.config; });
}

}  // namespace kvheap::bench
