// The merge loop every byte-pair encoding here shares: llama2.c's (merge by the merged piece's
// score), Hugging Face's (by the merge's rank) and tiktoken's (by the merged token's rank).
//
// All three repeatedly merge the adjacent pair that comes first, the leftmost on a tie, until no
// pair merges. Rescanning every pair after each merge is O(n^2) in the piece length (1.6 s for 64
// KB of text in llama2.c). Here the symbols form a linked list and every mergeable pair waits in a
// heap; a pair goes stale when either side changes, which version counters detect.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

namespace kvheap {

/// \brief What an adjacent pair of tokens merges into, and when: lower priorities merge first.
struct PairMerge {
  double priority;  ///< llama2.c: minus the merged piece's score; BPE files: the merge's rank
  int merged;       ///< id of the token the pair becomes
};

/// \brief Runs the merge loop; keeps its buffers between calls, so one merger per thread encodes
/// many pieces without allocating. Short pieces are rescanned after each merge instead: the same
/// choices, and faster than the heap for a word's few symbols.
class BpeMerger {
 public:
  /// \brief Merges `ids[first..]` in place. `merge_of(left, right)` returns the
  /// std::optional<PairMerge> of two adjacent ids, or nullopt when they do not merge.
  template <class MergeOf>
  void run(std::vector<int>& ids, std::size_t first, MergeOf&& merge_of);

 private:
  struct Node {
    int id;
    int next;  // index of the following symbol, -1 at the end
    int prev;
    unsigned version;
  };
  struct Pair {
    double priority;
    int left, right, merged;
    unsigned left_version, right_version;
  };
  // std::push_heap keeps the largest first: the pair with the lowest priority, then leftmost.
  static bool later(const Pair& a, const Pair& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.left > b.left;
  }
  template <class MergeOf>
  void run_short(std::vector<int>& ids, std::size_t first, MergeOf& merge_of);

  // Below this many symbols a plain rescan beats the heap (most words of a text): tiktoken's way.
  static constexpr int kShort = 32;
  std::vector<Node> nodes_;
  std::vector<Pair> heap_;
  std::vector<std::optional<PairMerge>> pair_at_;  // run_short: the merge of symbols i and i+1
};

template <class MergeOf>
void BpeMerger::run_short(std::vector<int>& ids, std::size_t first, MergeOf& merge_of) {
  auto at = [&](std::size_t i) -> int& { return ids[first + i]; };
  std::size_t n = ids.size() - first;
  pair_at_.resize(n - 1);
  for (std::size_t i = 0; i + 1 < n; ++i) pair_at_[i] = merge_of(at(i), at(i + 1));
  for (;;) {
    std::size_t best = n;
    for (std::size_t i = 0; i + 1 < n; ++i)
      if (pair_at_[i] && (best == n || pair_at_[i]->priority < pair_at_[best]->priority)) best = i;
    if (best == n) break;
    at(best) = pair_at_[best]->merged;
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(first + best + 1));
    pair_at_.erase(pair_at_.begin() + static_cast<std::ptrdiff_t>(best));
    --n;
    if (best > 0) pair_at_[best - 1] = merge_of(at(best - 1), at(best));
    if (best + 1 < n) pair_at_[best] = merge_of(at(best), at(best + 1));
  }
}

template <class MergeOf>
void BpeMerger::run(std::vector<int>& ids, std::size_t first, MergeOf&& merge_of) {
  const int n = static_cast<int>(ids.size() - first);
  if (n < 2) return;
  if (n <= kShort) {
    run_short(ids, first, merge_of);
    return;
  }
  nodes_.resize(static_cast<std::size_t>(n));
  heap_.clear();
  for (int i = 0; i < n; ++i)
    nodes_[static_cast<std::size_t>(i)] = {ids[first + static_cast<std::size_t>(i)],
                                           i + 1 < n ? i + 1 : -1, i - 1, 0};
  auto node = [&](int i) -> Node& { return nodes_[static_cast<std::size_t>(i)]; };
  auto offer = [&](int left) {
    const int right = node(left).next;
    if (right < 0) return;
    if (const std::optional<PairMerge> m = merge_of(node(left).id, node(right).id)) {
      heap_.push_back(
          {m->priority, left, right, m->merged, node(left).version, node(right).version});
      std::push_heap(heap_.begin(), heap_.end(), later);
    }
  };
  for (int i = 0; i + 1 < n; ++i) offer(i);

  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    const Pair p = heap_.back();
    heap_.pop_back();
    Node& left = node(p.left);
    Node& right = node(p.right);
    if (left.version != p.left_version || right.version != p.right_version) continue;
    left.id = p.merged;
    ++left.version;
    left.next = right.next;
    if (right.next >= 0) node(right.next).prev = p.left;
    ++right.version;  // the right symbol is gone; any pair still naming it is stale
    if (left.prev >= 0) offer(left.prev);
    offer(p.left);
  }

  // Symbol 0 is never a right-hand side, so the list always starts there.
  ids.resize(first);
  for (int i = 0; i >= 0; i = node(i).next) ids.push_back(node(i).id);
}

}  // namespace kvheap
