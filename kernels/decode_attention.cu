// Decode attention over the contiguous per-sequence cache (chapter 2), the split-K merge kernel
// and the launch plan shared with every other layout. Its CPU twin: decode_attention_cpu.hpp.
//
// Merge mapping: one block per (row, query head). The block reads every split's state at once (a
// thread per split), reduces their maxima to M, and keeps each split's weight exp(max_s - M) in
// shared memory; then groups of threads, one thread per output element in each, sum a share of
// the splits each, with loads that do not wait on one another, and add their sums up. Nothing
// waits on the split before it.
#include "device/cuda_compat.hpp"

#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "kernels/decode_attention_launch.cuh"

namespace kvheap::cuda {
namespace detail {
namespace {

/// Splits a merge thread sums: as many loads as it keeps in flight at once.
constexpr int kMergeSplitsPerThread = 8;

/// states: [splits, rows]; acc: [splits, rows, head_dim]; out: [rows, head_dim]. Grid: rows;
/// block: `lanes` (head_dim rounded up to whole warps) x `groups` threads; dynamic shared memory:
/// a float per split, then [groups][lanes] partial sums.
///
/// The log-sum-exp merge of attention_merge.hpp, in one step rather than a split at a time:
/// out = sum_s w_s acc_s / sum_s w_s sum_s, with w_s = exp(max_s - M) and M the largest max_s
/// (an empty split, max_s = -inf, weighs 0; a row of empty splits comes out 0). Thread (k, d)
/// sums element d over the splits s = k, k + groups, ...: their loads are independent, and
/// kMergeSplitsPerThread of them are in flight at once; the groups' sums then add up in k order.
__global__ void merge_splits_kernel(const SoftmaxState* states, const float* acc, float* out,
                                    int splits, int rows, int head_dim, int lanes, int groups) {
  float* weight = dynamic_smem<float>();  // [splits]
  float* part = weight + splits;          // [groups][lanes]
  const int r = static_cast<int>(blockIdx.x);
  const int t = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  float m = -INFINITY;
  for (int s = t; s < splits; s += threads)
    m = fmaxf(m, states[static_cast<long long>(s) * rows + r].max);
  m = block_reduce(m, Max{}, -INFINITY);
  float total = 0.0f;
  for (int s = t; s < splits; s += threads) {
    const SoftmaxState st = states[static_cast<long long>(s) * rows + r];
    const float w = st.max == -INFINITY ? 0.0f : expf(st.max - m);
    weight[s] = w;
    total = fmaf(w, st.sum, total);
  }
  total = block_sum(total);  // its barriers also publish weight[] to the block
  const int d = t % lanes, k = t / lanes;
  float o = 0.0f;
  if (d < head_dim) {
    const long long stride = static_cast<long long>(rows) * head_dim;
    const float* a = acc + static_cast<long long>(r) * head_dim + d;
    for (int s0 = k; s0 < splits; s0 += groups * kMergeSplitsPerThread) {
      float x[kMergeSplitsPerThread];
      KVHEAP_UNROLL
      for (int j = 0; j < kMergeSplitsPerThread; ++j) {
        const int s = s0 + j * groups;
        x[j] = s < splits ? a[s * stride] : 0.0f;
      }
      KVHEAP_UNROLL
      for (int j = 0; j < kMergeSplitsPerThread; ++j) {
        const int s = s0 + j * groups;
        if (s < splits) o = fmaf(x[j], weight[s], o);
      }
    }
  }
  part[k * lanes + d] = o;
  __syncthreads();
  if (k != 0 || d >= head_dim) return;
  for (int j = 1; j < groups; ++j) o += part[j * lanes + d];
  out[static_cast<long long>(r) * head_dim + d] = total > 0.0f ? o / total : 0.0f;
}

/// What the split-K plan needs of the current device: its SM count, and how many blocks of each
/// decode-attention kernel one SM holds. Asked once per device (a driver round trip each) and
/// kept; blocks_per_sm is indexed [head_dim kernel: 64, 128, any][log2 G].
struct DeviceOccupancy {
  int sm_count = 0;
  int blocks_per_sm[3][5] = {};
  bool asked[3][5] = {};
};

/// SM count of the current device and blocks per SM of the kernel for (head_dim, heads per
/// block), each asked of the device once.
std::pair<int, int> device_occupancy(int head_dim, int heads_per_block) {
  static std::mutex mutex;
  static std::map<int, DeviceOccupancy> devices;
  int device = 0;
  KVHEAP_CUDA_CHECK(cudaGetDevice(&device));
  int g = 1, log_g = 0;  // the kernel's G: heads_per_block rounded up to a power of two
  while (g < heads_per_block) {
    g *= 2;
    ++log_g;
  }
  // The generic kernel's occupancy is asked at its largest head_dim, so one answer serves all.
  const int hd = head_dim == 64 ? 0 : head_dim == 128 ? 1 : 2;
  std::lock_guard lock(mutex);
  DeviceOccupancy& occ = devices[device];
  if (occ.sm_count == 0) occ.sm_count = device_info(device).sm_count;
  int& blocks = occ.blocks_per_sm[hd][log_g];
  if (!occ.asked[hd][log_g]) {
    // The fewest over the layouts and KV types: the plan must not depend on either, or paged
    // and contiguous attention (and the chapters' bitwise claims resting on them) could split
    // differently; and a wave sized for the leanest kernel would overfill the others.
    blocks = std::min({layout_blocks_per_sm<ContiguousLocator>(head_dim, g),
                       paged_blocks_per_sm(head_dim, g), shared_prefix_blocks_per_sm(head_dim, g)});
    occ.asked[hd][log_g] = true;
  }
  return {occ.sm_count, blocks};
}

}  // namespace

int attention_blocks_per_sm(int head_dim, int heads_per_block) {
  return device_occupancy(head_dim, heads_per_block).second;
}

AttentionPlan plan_attention(const AttentionShape& s, int force_splits) {
  auto fail = [](const std::string& what) { throw InputError("decode_attention: " + what); };
  if (s.n < 0) fail("n = " + std::to_string(s.n) + " rows; need n >= 0");
  if (s.n_kv_heads <= 0 || s.n_heads <= 0 || s.n_heads % s.n_kv_heads != 0)
    fail("n_heads = " + std::to_string(s.n_heads) +
         " is not a positive multiple of n_kv_heads = " + std::to_string(s.n_kv_heads));
  if (s.head_dim <= 0 || s.head_dim % 8 != 0 || s.head_dim > 256)
    fail("head_dim = " + std::to_string(s.head_dim) + "; need a multiple of 8 in [8, 256]");
  if (force_splits < 0 || force_splits > 1024)
    fail("force_splits = " + std::to_string(force_splits) + "; need 0 (automatic) to 1024");
  AttentionPlan plan;
  const int group = s.n_heads / s.n_kv_heads;
  const int most = max_heads_per_block(s.head_dim);
  plan.chunks = (group + most - 1) / most;
  plan.heads_per_block = (group + plan.chunks - 1) / plan.chunks;
  if (force_splits > 0) {
    plan.splits = force_splits;
  } else if (s.n == 0) {
    plan.splits = 1;
  } else {
    const auto [sm_count, blocks_per_sm] = device_occupancy(s.head_dim, plan.heads_per_block);
    // = n * n_kv_heads for small groups; past a wave already, so more than INT_MAX is 1 split
    const long long blocks = static_cast<long long>(s.n) * s.n_kv_heads * plan.chunks;
    plan.splits = choose_num_splits(static_cast<int>(std::min<long long>(blocks, INT_MAX)),
                                    s.max_n_ctx, sm_count, blocks_per_sm, min_split_positions());
  }
  return plan;
}

void merge_splits(const SoftmaxState* states, const float* acc, float* out, int splits, int rows,
                  int head_dim, StreamHandle stream) {
  if (rows == 0) return;
  // Enough groups of lanes that a thread sums at most kMergeSplitsPerThread splits, within 1024
  // threads: 64 splits at head_dim 128 are 8 groups, each split's loads issued at once.
  const int lanes = row_threads(head_dim, 256);
  int groups = 1;
  while (groups * kMergeSplitsPerThread < splits && groups * 2 * lanes <= 1024) groups *= 2;
  const std::size_t smem = (static_cast<std::size_t>(splits) + groups * lanes) * sizeof(float);
  launch<merge_splits_kernel>(dim3(static_cast<unsigned>(rows)),
                              dim3(static_cast<unsigned>(groups * lanes)), smem, stream, states,
                              acc, out, splits, rows, head_dim, lanes, groups);
}

}  // namespace detail

void AttentionWorkspace::reserve(std::size_t partials, int head_dim) {
  // Powers of two: as contexts grow, the splits grow with them, and a steady pass frees nothing.
  acc_.grow(partials * static_cast<std::size_t>(head_dim));
  states_.grow(partials);
}

void decode_attention(DType kv, const float* q, const void* k_cache, const void* v_cache,
                      const int* n_ctx, const std::int64_t* base_row, const AttentionShape& shape,
                      float* out, AttentionWorkspace& workspace, StreamHandle stream,
                      int force_splits) {
  detail::launch_decode_attention(kv, q, k_cache, v_cache, n_ctx, ContiguousLocator{base_row},
                                  shape, out, workspace, stream, force_splits);
}

}  // namespace kvheap::cuda
