// The flattened batch: every forward pass takes token rows, the way production engines do.
//
//   row i: token id, sequence slot, position, wants_logits
//
// Chapter 1 feeds one sequence (its prompt as rows, then one row per step); the scheduler of
// chapter 5 mixes prefill chunks and decode rows of many sequences in one pass. The forward pass
// never needs to know which.
#pragma once

#include <vector>

namespace kvheap {

/// \brief One token to run through the model.
struct BatchRow {
  int token = 0;              ///< token id in [0, vocab_size)
  int slot = 0;               ///< which sequence's cache this row reads and extends
  int pos = 0;                ///< position in its sequence; attends to positions 0..pos
  bool wants_logits = false;  ///< compute the classifier for this row
};

/// \brief Rows of one forward pass. Rows of the same slot appear in increasing position order.
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

}  // namespace kvheap
