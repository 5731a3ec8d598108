#include "common/cache/batch.hpp"

#include <fmt/format.h>

#include "base/error.hpp"

namespace kvheap {

std::unordered_map<int, int> lengths_after(const Batch& batch,
                                           const std::function<int(int)>& length_of) {
  struct Cursor {
    int next;       // the sequence's next position, as the rows so far leave it
    int last = -1;  // the last position a row of this batch wrote
  };
  std::unordered_map<int, Cursor> cursor;
  for (int i = 0; i < batch.size(); ++i) {
    const BatchRow& r = batch.rows[i];
    if (r.pos < 0)
      throw InputError(
          fmt::format("batch row {} writes position {} of sequence {}; expected a "
                      "position of 0 or more",
                      i, r.pos, r.seq));
    auto it = cursor.find(r.seq);
    if (it == cursor.end()) it = cursor.emplace(r.seq, Cursor{length_of(r.seq)}).first;
    Cursor& c = it->second;
    if (r.pos <= c.last)
      throw InputError(
          fmt::format("batch row {} writes position {} of sequence {} after position {}: a "
                      "sequence's rows must come in increasing position order, each once",
                      i, r.pos, r.seq, c.last));
    if (r.pos > c.next)
      throw InputError(
          fmt::format("batch row {} writes position {} of sequence {}, but its next "
                      "position is {}: positions must be contiguous",
                      i, r.pos, r.seq, c.next));
    if (r.pos == c.next) ++c.next;
    c.last = r.pos;
  }
  std::unordered_map<int, int> lengths;
  for (const auto& [seq, c] : cursor) lengths.emplace(seq, c.next);
  return lengths;
}

}  // namespace kvheap
