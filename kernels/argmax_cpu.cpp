// CPU greedy argmax per row (the twin of argmax.cu).
#include <cmath>

#include "base/error.hpp"
#include "kernels/argmax.hpp"

namespace kvheap::cpu {

void argmax_rows(int* ids, const float* logits, int rows, int vocab) {
  if (vocab < 1) throw InputError("argmax_rows: a row of logits needs at least one entry");
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<long>(r) * vocab;
    int best = 0;
    for (int i = 0; i < vocab; ++i) {
      if (std::isnan(row[i])) {
        best = -1;
        break;
      }
      if (row[i] > row[best]) best = i;  // strict >: the first of equal maxima wins
    }
    ids[r] = best;
  }
}

}  // namespace kvheap::cpu
