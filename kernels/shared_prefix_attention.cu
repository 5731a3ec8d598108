// Shared-prefix decode attention on the GPU (chapter 4): each group's prefix is read once for all
// its rows. See kernels/shared_prefix_attention.hpp for the algorithm; the CPU twin is
// kernels/shared_prefix_attention_cpu.hpp.
//
// Both passes leave raw (max, sum, acc) partial states. The prefix pass sees a group as one row
// whose query heads are all its rows' heads (grouped-query attention with a larger group). For
// fp16 and bf16 caches at head_dim 64 or 128, on a GPU with tensor cores (compute capability 8.0
// on) and in the simulator, it is prefix_product.cuh's product, which reads the prefix once for
// up to 128 query rows of a KV head; otherwise it is chapter 2's decode-attention kernel with
// keep_partials, which reads it once per 16 heads. The rows' pass is always the decode kernel,
// and offsets each row's positions by its group's prefix. The decode kernel reads both passes
// through one locator type, so its instantiations are compiled once for the two. Two small
// kernels gather the wide queries and merge the partial states.
#include "device/cuda_compat.hpp"

#include <climits>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "base/error.hpp"
#include "device/device.hpp"
#include "device/launch.hpp"
#include "kernels/decode_attention_launch.cuh"
#include "kernels/paged_attention.hpp"
#include "kernels/prefix_product.cuh"
#include "kernels/shared_prefix_attention.hpp"

namespace kvheap::cuda {
namespace {

static_assert(gpu_heads_per_block(128) == detail::max_heads_per_block(128) &&
                  gpu_heads_per_block(256) == detail::max_heads_per_block(256),
              "the CPU-side count of prefix reads must follow the kernel's heads per block");
static_assert(kPrefixProductRows == detail::kProductRows,
              "the CPU-side count of prefix reads must follow the product's rows per block");

/// Both passes' rows, through one locator so that nvcc compiles the kernel once for them:
///  - the prefix pass: group g's wide row over its shared positions [first[g], first[g] +
///    n_ctx), through the page table of its first sequence; only its first group_size[g] x group
///    heads of each KV head are real, the rest pad it to the widest group;
///  - the rows' own pass (group_size null): positions [first[i], first[i] + n_ctx) of row i's
///    sequence; every head real.
/// Either way a row's positions are seen as [0, n_ctx).
struct SharedPrefixLocator {
  PagedLocator pages;
  const int* first;       // [n] or [G]
  const int* group_size;  // [G] rows in each group, or null
  int group;              // query heads per KV head of one row
  /// Row i's page table and first position, read once.
  struct Rows {
    PagedLocator::Rows pages;
    int first = 0;
    KVHEAP_HD std::int64_t at(int t) const { return pages.at(t + first); }
    KVHEAP_HD PageView page_view() const {
      PageView v = pages.page_view();
      v.first = first;
      return v;
    }
  };
  KVHEAP_HD Rows rows_of(int i) const {
    return Rows{pages.rows_of(i), first != nullptr ? first[i] : 0};
  }
  KVHEAP_HD int heads_of(int i) const {
    return group_size != nullptr ? group_size[i] * group : INT_MAX;
  }
};

/// wide_q [G, n_heads * widest, head_dim]: wide head h * (widest * group) + m * group + j of group
/// g is head h * group + j of the group's m-th row (zeros past the group's size). Grid: one block
/// per (g, wide head), flattened (a y dimension would cap the wide heads at 65535); threads:
/// head_dim.
__global__ void gather_wide_q_kernel(const float* q, SharedPrefixView plan, int n_heads, int group,
                                     int head_dim, float* wide_q) {
  const long long wide_heads = static_cast<long long>(n_heads) * plan.widest;
  const int g = static_cast<int>(blockIdx.x / wide_heads);
  const int w = static_cast<int>(blockIdx.x % wide_heads);
  const int d = static_cast<int>(threadIdx.x);
  if (d >= head_dim) return;
  const int per_kv = plan.widest * group;
  const int h = w / per_kv, m = (w % per_kv) / group, j = w % group;
  const int row = plan.group_rows[g * plan.widest + m];
  const long long dst = (static_cast<long long>(g) * wide_heads + w) * head_dim + d;
  wide_q[dst] =
      row < 0 ? 0.0f : q[(static_cast<long long>(row) * n_heads + h * group + j) * head_dim + d];
}

/// out[i, qh] = merge of the prefix pass's partials (for a row in a group) and the rows' pass's,
/// normalised. Grid: n * n_heads, threads: head_dim.
__global__ void merge_shared_prefix_kernel(const SoftmaxState* prefix_state,
                                           const float* prefix_acc, int prefix_splits,
                                           const SoftmaxState* own_state, const float* own_acc,
                                           int own_splits, SharedPrefixView plan, int n,
                                           int n_heads, int group, int head_dim, float* out) {
  const int i = static_cast<int>(blockIdx.x) / n_heads;
  const int qh = static_cast<int>(blockIdx.x) % n_heads;
  const int d = static_cast<int>(threadIdx.x);
  if (d >= head_dim) return;  // no barrier follows
  SoftmaxState state;
  float a = 0.0f;
  for (int e = plan.path_at[i]; e < plan.path_at[i + 1]; ++e) {  // the row's groups, parents first
    const int g = plan.path_group[e];
    const int wide_heads = n_heads * plan.widest;
    const int wide = (qh / group) * plan.widest * group + plan.path_member[e] * group + qh % group;
    for (int s = 0; s < prefix_splits; ++s) {
      const long long p = (static_cast<long long>(s) * plan.groups + g) * wide_heads + wide;
      merge_partial(state, &a, prefix_state[p], prefix_acc + p * head_dim + d, 1);
    }
  }
  for (int s = 0; s < own_splits; ++s) {
    const long long p = (static_cast<long long>(s) * n + i) * n_heads + qh;
    merge_partial(state, &a, own_state[p], own_acc + p * head_dim + d, 1);
  }
  out[(static_cast<long long>(i) * n_heads + qh) * head_dim + d] =
      state.sum > 0.0f ? a / state.sum : 0.0f;
}

/// Whether the current device runs mma.sync.m16n8k16 (compute capability 8.0 on, or the
/// simulator), asked of the driver once per device.
bool tensor_cores() {
  static std::mutex mutex;
  static std::map<int, bool> devices;
  int device = 0;
  KVHEAP_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard lock(mutex);
  const auto it = devices.find(device);
  if (it != devices.end()) return it->second;
  const DeviceInfo info = device_info(device);
  return devices[device] = info.is_simulator || info.cc_major >= 8;
}

/// The current device's SM count, and how many blocks of `threads` threads of `Kernel` (a prefix
/// product) one SM holds: asked of the driver once per device and block size, since every layer
/// of every step launches it.
template <auto Kernel>
std::pair<int, int> product_occupancy(int threads, std::size_t smem) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, std::pair<int, int>> known;  // (device, threads) ->
  int device = 0;
  KVHEAP_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard lock(mutex);
  const auto it = known.find({device, threads});
  if (it != known.end()) return it->second;
  return known[{device, threads}] = {device_info(device).sm_count,
                                     max_active_blocks<Kernel>(threads, smem)};
}

/// The prefix pass as a tensor-core product (prefix_product.cuh) for the groups of `plan`;
/// returns its number of context splits.
template <class T, int HD>
int launch_prefix_product(const float* wide_q, const void* k_cache, const void* v_cache,
                          const PagedLocator& by_group, const SharedPrefixView& plan,
                          const AttentionShape& shape, AttentionWorkspace& ws, StreamHandle stream,
                          int force_splits) {
  using detail::kProductRows;
  const int group = shape.n_heads / shape.n_kv_heads;
  detail::ProductDims d{};
  d.groups = plan.groups;
  d.n_kv_heads = shape.n_kv_heads;
  d.wide_heads = shape.n_heads * plan.widest;
  d.per_kv = plan.widest * group;
  d.slices = (d.per_kv + kProductRows - 1) / kProductRows;
  d.slice_rows = slice_heads(d.per_kv, kProductRows);  // as SharedPrefixPlan::positions_read
  d.group = group;
  d.scale = 1.0f / sqrtf(static_cast<float>(HD));
  const long long items = static_cast<long long>(plan.groups) * shape.n_kv_heads * d.slices;
  if (items > INT_MAX)
    throw InputError("shared_prefix_attention: " + std::to_string(items) +
                     " (group, KV head, slice) blocks exceed the grid limit");
  const int threads = (d.slice_rows + 15) / 16 * 32;
  constexpr auto kernel = detail::prefix_product_kernel<T, HD>;
  constexpr std::size_t smem = detail::product_smem_bytes(HD);
  allow_dynamic_smem<kernel>(smem);
  if (force_splits > 0) {
    d.splits = force_splits;
  } else {
    // As the decode kernel's plan: fill one wave of resident blocks, no chunk below 256 positions.
    const auto [sm_count, blocks_per_sm] = product_occupancy<kernel>(threads, smem);
    d.splits = choose_num_splits(static_cast<int>(items), plan.max_prefix, sm_count, blocks_per_sm,
                                 detail::min_split_positions());
  }
  ws.reserve(static_cast<std::size_t>(d.splits) * plan.groups * d.wide_heads, HD);
  launch<kernel>(dim3(static_cast<unsigned>(items), static_cast<unsigned>(d.splits)),
                 dim3(static_cast<unsigned>(threads)), smem, stream, wide_q,
                 static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), plan.prefix_len,
                 plan.prefix_begin, plan.group_size, by_group, d, ws.acc(), ws.states());
  return d.splits;
}

template <class T>
int launch_prefix_product(const float* wide_q, const void* k_cache, const void* v_cache,
                          const PagedLocator& by_group, const SharedPrefixView& plan,
                          const AttentionShape& shape, AttentionWorkspace& ws, StreamHandle stream,
                          int force_splits) {
  if (shape.head_dim == 64)
    return launch_prefix_product<T, 64>(wide_q, k_cache, v_cache, by_group, plan, shape, ws, stream,
                                        force_splits);
  return launch_prefix_product<T, 128>(wide_q, k_cache, v_cache, by_group, plan, shape, ws, stream,
                                       force_splits);
}

}  // namespace

bool prefix_pass_is_product(DType kv, int head_dim) {
  return kv != DType::F32 && (head_dim == 64 || head_dim == 128) && tensor_cores();
}

int prefix_heads_per_read(DType kv, int head_dim) {
  return prefix_pass_is_product(kv, head_dim) ? detail::kProductRows
                                              : gpu_heads_per_block(head_dim);
}

void shared_prefix_attention(DType kv, const float* q, const void* k_cache, const void* v_cache,
                             const PagedLocator& pages, const SharedPrefixView& plan,
                             const AttentionShape& shape, float* out, float* wide_q,
                             AttentionWorkspace& prefix_ws, AttentionWorkspace& own_ws,
                             StreamHandle stream, int force_splits, SideStream* side) {
  if (shape.n == 0) return;
  if (pages.block_size <= 0)
    throw InputError("shared_prefix_attention: block_size = " + std::to_string(pages.block_size) +
                     "; need at least one slot per block");
  if (shape.n_kv_heads <= 0 || shape.n_heads % shape.n_kv_heads != 0)
    throw InputError("shared_prefix_attention: n_heads must be a multiple of n_kv_heads");
  detail::check_page_bytes("shared_prefix_attention", pages.block_size, shape, kv);
  const int group = shape.n_heads / shape.n_kv_heads;
  const unsigned threads = static_cast<unsigned>((shape.head_dim + 31) / 32 * 32);
  const long long blocks = static_cast<long long>(plan.groups) * shape.n_heads * plan.widest;
  if (blocks > INT_MAX)
    throw InputError("shared_prefix_attention: " + std::to_string(blocks) +
                     " wide query heads exceed the grid limit");
  const bool product = plan.groups > 0 && prefix_pass_is_product(kv, shape.head_dim);
  if (product && (reinterpret_cast<std::uintptr_t>(k_cache) % 16 != 0 ||
                  reinterpret_cast<std::uintptr_t>(v_cache) % 16 != 0))
    throw InputError("shared_prefix_attention: the caches must be 16-byte aligned");

  // The rows' own pass first, on the side stream when there is one: it needs nothing the prefix
  // pass computes, so the two may run at the same time until the merge. Should a launch throw
  // before the merge, the side stream is still joined, so that `stream`'s later work (the next
  // step's writes to the cache and to own_ws) stays ordered after the own pass.
  AttentionShape own = shape;
  own.max_n_ctx = plan.max_own;
  const StreamHandle own_stream = side != nullptr ? side->fork(stream) : stream;
  struct JoinOnThrow {
    SideStream* side;
    StreamHandle main;
    ~JoinOnThrow() {
      if (side != nullptr) side->join_quietly(main);
    }
  } join_on_throw{side, stream};
  const int own_splits = detail::launch_decode_attention_partials(
      kv, q, k_cache, v_cache, plan.own_ctx, SharedPrefixLocator{pages, plan.first, nullptr, group},
      own, own_ws, own_stream, force_splits);

  int prefix_splits = 0;
  if (plan.groups > 0) {
    launch<gather_wide_q_kernel>(dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, stream, q,
                                 plan, shape.n_heads, group, shape.head_dim, wide_q);
    AttentionShape wide = shape;
    wide.n = plan.groups;
    wide.n_heads = shape.n_heads * plan.widest;
    wide.max_n_ctx = plan.max_prefix;
    PagedLocator by_group = pages;
    by_group.row_seq = plan.prefix_seq;
    if (product) {
      prefix_splits =
          kv == DType::F16
              ? launch_prefix_product<__half>(wide_q, k_cache, v_cache, by_group, plan, shape,
                                              prefix_ws, stream, force_splits)
              : launch_prefix_product<__nv_bfloat16>(wide_q, k_cache, v_cache, by_group, plan,
                                                     shape, prefix_ws, stream, force_splits);
    } else {
      prefix_splits = detail::launch_decode_attention_partials(
          kv, wide_q, k_cache, v_cache, plan.prefix_len,
          SharedPrefixLocator{by_group, plan.prefix_begin, plan.group_size, group}, wide, prefix_ws,
          stream, force_splits);
    }
  }
  if (side != nullptr) {
    join_on_throw.side = nullptr;
    side->join(stream);
  }
  launch<merge_shared_prefix_kernel>(
      dim3(static_cast<unsigned>(shape.n * shape.n_heads)), dim3(threads), 0, stream,
      plan.groups > 0 ? prefix_ws.states() : nullptr, plan.groups > 0 ? prefix_ws.acc() : nullptr,
      prefix_splits, own_ws.states(), own_ws.acc(), own_splits, plan, shape.n, shape.n_heads, group,
      shape.head_dim, out);
}

namespace detail {

int shared_prefix_blocks_per_sm(int head_dim, int g) {
  return layout_blocks_per_sm<SharedPrefixLocator>(head_dim, g);
}

}  // namespace detail
}  // namespace kvheap::cuda
