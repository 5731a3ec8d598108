// The flattened batch: every forward pass takes token rows, the way production engines do.
//
//   row i: token id, sequence, position, wants_logits
//
// Chapter 1 feeds one sequence (its prompt as rows, then one row per step); the scheduler of
// chapter 5 mixes prefill chunks and decode rows of many sequences in one pass. The forward pass
// never needs to know which.
#pragma once

#include <functional>
#include <unordered_map>
#include <vector>

namespace kvheap {

/// \brief One token to run through the model.
struct BatchRow {
  int token = 0;              ///< token id in [0, vocab_size)
  int seq = 0;                ///< which sequence's cache this row reads and extends
  int pos = 0;                ///< position in its sequence; attends to positions 0..pos
  bool wants_logits = false;  ///< compute the classifier for this row
};

/// \brief Rows of one forward pass. Rows of the same sequence appear in increasing position order.
struct Batch {
  std::vector<BatchRow> rows;  ///< [n] in the order their logits come back

  /// \brief Number of rows.
  [[nodiscard]] int size() const { return static_cast<int>(rows.size()); }
  /// \brief Number of rows whose logits are wanted (the classifier's batch size).
  [[nodiscard]] int num_logit_rows() const {
    int n = 0;
    for (const auto& r : rows) n += r.wants_logits ? 1 : 0;
    return n;
  }
};

/// \brief Where one forward pass's time went, in seconds; the serving loop's phase breakdown
/// adds its own host phases around these.
struct PassTimes {
  double prepare = 0;  ///< host: the cache's prepare() (page tables, the view), and on a GPU
                       ///< packing the pass's one upload and queueing it
  double forward = 0;  ///< the model: on a GPU the device time between two events, else wall
  double sample = 0;   ///< choosing each job's token and bringing it to the host: on a GPU the
                       ///< sampling kernel and the 16-byte-a-job download, timed by events
  bool device_timed = false;  ///< forward and sample are device times (a GPU's events)
};

/// \brief Checks where a batch's rows write and returns, for each sequence it touches, the
/// sequence's length after the batch. `length_of(seq)` is a sequence's length before it (and
/// throws for a sequence that is not admitted).
///
/// Every cache policy holds a sequence's positions 0..length-1 and nothing else, so a row may
/// rewrite a position already held or write the next one, and a sequence's rows must come in
/// increasing position order, each position once. Anything else throws InputError naming the
/// row: a position past the next would leave a gap the row's attention reads as if written (zeros,
/// or an earlier occupant's keys), and two rows writing one position race on a GPU.
std::unordered_map<int, int> lengths_after(const Batch& batch,
                                           const std::function<int(int)>& length_of);

}  // namespace kvheap
