// The live sequences of a block manager, by id: the lowest free id for a new one, and one named
// error for an id that is not live. Chapter 3's BlockManager and chapter 4's sharing one keep
// their page tables in one.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <utility>
#include <vector>

#include "base/error.hpp"

namespace kvheap::ch03 {

/// \brief Records of type S by sequence id; S is default-constructible with a `bool live` member.
///
/// A new sequence takes the lowest id that is not live, searched from a hint below which every id
/// is live, so admitting N sequences without freeing any stays linear in N (a search from 0 made
/// admitting a million sequences quadratic).
template <class S>
class SequenceTable {
 public:
  /// \brief The id the next add() takes; makes room for it first, so add() cannot throw.
  int next_id() {
    int id = first_free_;
    while (id < size() && seqs_[id].live) ++id;
    if (id == size()) seqs_.emplace_back();
    return id;
  }
  /// \brief Makes `record` live under next_id(), which the caller has just asked for.
  void add(int id, S record) noexcept {
    seqs_[id] = std::move(record);
    seqs_[id].live = true;
    first_free_ = id + 1;
  }
  /// \brief Ends sequence `id`: its record becomes S{} and its id may be reused.
  void remove(int id) {
    seqs_[id] = S{};
    first_free_ = std::min(first_free_, id);
  }

  /// \brief True when `id` is a live sequence.
  [[nodiscard]] bool is_live(int id) const { return id >= 0 && id < size() && seqs_[id].live; }
  /// \brief The live sequence `id`; InputError naming `what` was asked of it otherwise.
  S& at(int id, const char* what) {
    if (!is_live(id)) throw InputError(fmt::format("{}: sequence {} is not allocated", what, id));
    return seqs_[id];
  }
  /// \copydoc at()
  [[nodiscard]] const S& at(int id, const char* what) const {
    return const_cast<SequenceTable*>(this)->at(id, what);
  }
  /// \brief Ids of the live sequences, ascending.
  [[nodiscard]] std::vector<int> live_ids() const {
    std::vector<int> ids;
    for (int i = 0; i < size(); ++i)
      if (seqs_[i].live) ids.push_back(i);
    return ids;
  }
  /// \brief Every record, live or not, by id.
  [[nodiscard]] const std::vector<S>& all() const { return seqs_; }

  /// \brief Throws std::logic_error when an id below the search hint is not live: add() would
  /// never hand it out again.
  void check_hint() const {
    for (int id = 0; id < std::min(first_free_, size()); ++id)
      if (!seqs_[id].live)
        throw std::logic_error(
            fmt::format("sequence {} is free but below the search hint {}: allocate would skip it",
                        id, first_free_));
  }

 private:
  [[nodiscard]] int size() const { return static_cast<int>(seqs_.size()); }

  std::vector<S> seqs_;  // indexed by sequence id
  int first_free_ = 0;   // every id below it is live: where next_id's search starts
};

}  // namespace kvheap::ch03
