// Host side of decode attention for any row locator: picks the kernel instantiation (KV dtype x
// head_dim x group size) and runs the split-K merge. Chapter 3's paged attention calls
// launch_decode_attention with its own locator; nothing here depends on the layout.
#pragma once

#include "device/cuda_compat.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "base/error.hpp"
#include "device/launch.hpp"
#include "kernels/decode_attention.cuh"

namespace kvheap::cuda::detail {

/// \brief The arguments of one decode-attention launch, and the dispatch from runtime sizes (KV
/// dtype, head_dim, heads per block) to the kernel instantiation that handles them.
template <class Locator>
struct AttentionLaunch {
  const float* q;       // [n, n_heads, head_dim]
  const void* k_cache;  // [rows, n_kv_heads, head_dim]
  const void* v_cache;  // [rows, n_kv_heads, head_dim]
  const int* n_ctx;     // [n]
  Locator loc;
  KernelDims d;
  float* out;                // [n, n_heads, head_dim]
  float* part_acc;           // [splits, n, n_heads, head_dim] or null
  SoftmaxState* part_state;  // [splits, n, n_heads] or null
  StreamHandle stream;

  template <class T, int HD, int G>
  void run() const {
    const long long blocks = static_cast<long long>(d.n) * d.n_kv_heads * d.chunks;
    if (blocks > INT_MAX)
      throw InputError("decode_attention: " + std::to_string(blocks) +
                       " (row, KV head) blocks exceed the grid limit");
    constexpr auto kernel = decode_attention_kernel<T, HD, G, Locator>;
    constexpr std::size_t smem = attention_smem_bytes(kPagedRows<Locator>);
    allow_dynamic_smem<kernel>(smem);
    launch<kernel>(dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(d.splits)),
                   dim3(kThreads), smem, stream, q, static_cast<const T*>(k_cache),
                   static_cast<const T*>(v_cache), n_ctx, loc, d, out, part_acc, part_state);
  }
  template <class T, int HD>
  void by_group() const {
    const int h = d.heads_per_block;
    if (h <= 1) return run<T, HD, 1>();
    if (h <= 2) return run<T, HD, 2>();
    if (h <= 4) return run<T, HD, 4>();
    if (h <= 8) return run<T, HD, 8>();
    return run<T, HD, 16>();
  }
  template <class T>
  void by_head_dim() const {
    if (d.head_dim == 64) return by_group<T, 64>();
    if (d.head_dim == 128) return by_group<T, 128>();
    return by_group<T, 0>();
  }
};

/// \brief Blocks of decode_attention_kernel<T, HD, G, Locator> one SM holds at once (its shared
/// memory allowed first, as a launch does).
template <class T, class Locator, int HD, int G>
int kernel_blocks_per_sm() {
  constexpr auto kernel = decode_attention_kernel<T, HD, G, Locator>;
  constexpr std::size_t smem = attention_smem_bytes(kPagedRows<Locator>);
  allow_dynamic_smem<kernel>(smem);
  return max_active_blocks<kernel>(kThreads, smem);
}

/// \brief Blocks of decode_attention_kernel<T, HD, G, Locator> one SM holds at once, the fewest
/// over the three KV types. (Every instantiation uses the same shared memory, sized for its
/// largest head_dim, so `head_dim` does not change it.)
template <class Locator, int HD, int G>
int blocks_per_sm_over_types(int /*head_dim*/) {
  return std::min({kernel_blocks_per_sm<float, Locator, HD, G>(),
                   kernel_blocks_per_sm<__half, Locator, HD, G>(),
                   kernel_blocks_per_sm<__nv_bfloat16, Locator, HD, G>()});
}

/// \brief blocks_per_sm_over_types of the head_dim-HD kernel for `g` heads per block (a power of
/// two up to 16).
template <class Locator, int HD>
int blocks_per_sm_by_group(int head_dim, int g) {
  switch (g) {
    case 1: return blocks_per_sm_over_types<Locator, HD, 1>(head_dim);
    case 2: return blocks_per_sm_over_types<Locator, HD, 2>(head_dim);
    case 4: return blocks_per_sm_over_types<Locator, HD, 4>(head_dim);
    case 8: return blocks_per_sm_over_types<Locator, HD, 8>(head_dim);
    default: return blocks_per_sm_over_types<Locator, HD, 16>(head_dim);
  }
}

/// \brief blocks_per_sm_over_types of the kernel a launch at `head_dim` with `g` heads per block
/// runs; the generic head_dim kernel is counted at its largest head_dim.
template <class Locator>
int layout_blocks_per_sm(int head_dim, int g) {
  if (head_dim == 64) return blocks_per_sm_by_group<Locator, 64>(64, g);
  if (head_dim == 128) return blocks_per_sm_by_group<Locator, 128>(128, g);
  return blocks_per_sm_by_group<Locator, 0>(max_head_dim(0, g), g);
}

/// \brief layout_blocks_per_sm of the paged and the shared-prefix row locators, defined where
/// those kernels are instantiated (paged_attention.cu, shared_prefix_attention.cu). The split
/// plan takes the fewest over every layout, so that it fits each and stays the same for all.
int paged_blocks_per_sm(int head_dim, int g);
int shared_prefix_blocks_per_sm(int head_dim, int g);

/// \brief Throws InputError (naming `who`) unless one page of `block_size` rows of `shape` in
/// `kv` is below 2^31 bytes: the kernel computes a row's offset in its page in 32 bits.
inline void check_page_bytes(const char* who, int block_size, const AttentionShape& shape,
                             DType kv) {
  const long long page = static_cast<long long>(block_size) * shape.n_kv_heads * shape.head_dim *
                         static_cast<long long>(dtype_size(kv));
  if (page >= (1LL << 31))
    throw InputError(std::string(who) + ": a page of " + std::to_string(block_size) + " rows is " +
                     std::to_string(page) +
                     " bytes; the kernel addresses a page's rows in 32 bits: give a block size "
                     "whose page is below 2 GiB");
}

/// \brief Validates and plans a launch over `loc`; throws InputError for a bad shape or pointer.
template <class Locator>
AttentionLaunch<Locator> prepare_launch(const float* q, const void* k_cache, const void* v_cache,
                                        const int* n_ctx, Locator loc, const AttentionShape& shape,
                                        float* out, StreamHandle stream, int force_splits) {
  const AttentionPlan plan = plan_attention(shape, force_splits);
  // The kernel moves q, out and the cache in 16-byte vectors (the cache by cp.async, which needs
  // them aligned); every offset inside them is a multiple of 16 bytes (head_dim % 8 == 0), so only
  // the base pointers can break alignment.
  const void* vectors[] = {q, k_cache, v_cache, out};
  for (const void* p : vectors)
    if (shape.n > 0 && reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
      throw InputError("decode_attention: q, out and the caches must be 16-byte aligned");
  KernelDims d{};
  d.n = shape.n;
  d.n_heads = shape.n_heads;
  d.n_kv_heads = shape.n_kv_heads;
  d.head_dim = shape.head_dim;
  d.group = shape.n_heads / shape.n_kv_heads;
  d.heads_per_block = plan.heads_per_block;
  d.chunks = plan.chunks;
  d.splits = plan.splits;
  d.scale = 1.0f / sqrtf(static_cast<float>(shape.head_dim));  // as in cpu::attend_kv_heads
  d.keep_partials = false;
  return AttentionLaunch<Locator>{q, k_cache, v_cache, n_ctx,   loc,
                                  d, out,     nullptr, nullptr, stream};
}

/// \brief Runs the kernel instantiation for `kv` (the launch's sizes pick the rest).
template <class Locator>
void run_launch(DType kv, const AttentionLaunch<Locator>& l) {
  switch (kv) {
    case DType::F32: l.template by_head_dim<float>(); break;
    case DType::F16: l.template by_head_dim<__half>(); break;
    case DType::BF16: l.template by_head_dim<__nv_bfloat16>(); break;
  }
}

/// \brief Validates, plans and launches decode attention over the layout `loc` describes; the
/// body of every layout's public decode-attention function.
template <class Locator>
void launch_decode_attention(DType kv, const float* q, const void* k_cache, const void* v_cache,
                             const int* n_ctx, Locator loc, const AttentionShape& shape, float* out,
                             AttentionWorkspace& workspace, StreamHandle stream, int force_splits) {
  AttentionLaunch<Locator> l =
      prepare_launch(q, k_cache, v_cache, n_ctx, loc, shape, out, stream, force_splits);
  if (shape.n == 0) return;
  const std::size_t rows = static_cast<std::size_t>(shape.n) * shape.n_heads;
  if (l.d.splits > 1) {
    workspace.reserve(rows * l.d.splits, shape.head_dim);
    l.part_acc = workspace.acc();
    l.part_state = workspace.states();
  }
  run_launch(kv, l);
  if (l.d.splits > 1)
    merge_splits(l.part_state, l.part_acc, out, l.d.splits, static_cast<int>(rows), shape.head_dim,
                 stream);
}

/// \brief Like launch_decode_attention, but leaves every (split, row, head) unnormalised in
/// `workspace` (acc and state, [splits, n, n_heads]) for the caller to merge with other partials.
/// Returns the number of splits (`force_splits` as in launch_decode_attention).
template <class Locator>
int launch_decode_attention_partials(DType kv, const float* q, const void* k_cache,
                                     const void* v_cache, const int* n_ctx, Locator loc,
                                     const AttentionShape& shape, AttentionWorkspace& workspace,
                                     StreamHandle stream, int force_splits = 0) {
  const std::size_t rows = static_cast<std::size_t>(shape.n) * shape.n_heads;
  AttentionLaunch<Locator> l =
      prepare_launch(q, k_cache, v_cache, n_ctx, loc, shape, nullptr, stream, force_splits);
  if (shape.n == 0) return l.d.splits;
  workspace.reserve(rows * l.d.splits, shape.head_dim);
  l.d.keep_partials = true;
  l.part_acc = workspace.acc();
  l.part_state = workspace.states();
  run_launch(kv, l);
  return l.d.splits;
}

}  // namespace kvheap::cuda::detail
