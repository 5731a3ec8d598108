// A cache-row accessor for attention tests that counts what the kernel asks of it.
#pragma once

#include "kernels/decode_attention_cpu.hpp"

namespace kvheap::test {

/// \brief cpu::ContiguousRows that counts the positions asked for (K and V alike), and those
/// outside [t_begin, t_end): a kernel, its prefetches included, may ask for its span only.
template <class T>
struct CountedRows {
  cpu::ContiguousRows<T> rows;
  int t_begin, t_end;
  mutable int asked = 0, outside = 0;
  const T* k(int t) const { return count(t), rows.k(t); }
  const T* v(int t) const { return count(t), rows.v(t); }
  void count(int t) const {
    ++asked;
    outside += t < t_begin || t >= t_end;
  }
};

}  // namespace kvheap::test
