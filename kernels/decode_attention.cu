// Decode attention over the contiguous per-sequence cache (chapter 2), the split-K merge kernel
// and the launch plan shared with every other layout. Its CPU twin: decode_attention_cpu.hpp.
//
// Merge mapping: one block per (row, query head), one thread per output element d. Each thread
// folds the S partial states in split order with merge_partial on its single element; the states
// are recomputed by every thread (S is at most 64), which costs less than sharing them.
#include "device/cuda_compat.hpp"

#include <string>

#include "kernels/decode_attention_launch.cuh"

namespace kvheap::cuda {
namespace detail {
namespace {

/// states: [splits, rows]; acc: [splits, rows, head_dim]; out: [rows, head_dim]. Grid: rows.
__global__ void merge_splits_kernel(const SoftmaxState* states, const float* acc, float* out,
                                    int splits, int rows, int head_dim) {
  const int r = static_cast<int>(blockIdx.x);
  const int dim = static_cast<int>(threadIdx.x);
  if (dim >= head_dim) return;  // no barrier follows, so idle threads may leave
  SoftmaxState state;
  float a = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const long long p = static_cast<long long>(s) * rows + r;
    merge_partial(state, &a, states[p], acc + p * head_dim + dim, 1);
  }
  out[static_cast<long long>(r) * head_dim + dim] = state.sum > 0.0f ? a / state.sum : 0.0f;
}

/// SM count of device 0, asked once: device_info() is a driver round trip.
int cached_sm_count() {
  static const int sm_count = device_info(0).sm_count;
  return sm_count;
}

}  // namespace

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
  plan.chunks = (group + 15) / 16;  // the kernel holds at most 16 heads per block
  plan.heads_per_block = (group + plan.chunks - 1) / plan.chunks;
  if (force_splits > 0) {
    plan.splits = force_splits;
  } else {
    const int blocks = s.n * s.n_kv_heads * plan.chunks;  // = n * n_kv_heads for groups <= 16
    plan.splits = s.n == 0 ? 1 : choose_num_splits(blocks, s.max_n_ctx, cached_sm_count());
  }
  return plan;
}

void merge_splits(const SoftmaxState* states, const float* acc, float* out, int splits, int rows,
                  int head_dim, StreamHandle stream) {
  if (rows == 0) return;
  const int threads = ((head_dim + 31) / 32) * 32;
  launch<merge_splits_kernel>(dim3(static_cast<unsigned>(rows)),
                              dim3(static_cast<unsigned>(threads)), 0, stream, states, acc, out,
                              splits, rows, head_dim);
}

}  // namespace detail

void AttentionWorkspace::reserve(std::size_t partials, int head_dim) {
  const std::size_t floats = partials * static_cast<std::size_t>(head_dim);
  if (acc_.size() < floats) {
    acc_.reset();  // free first: the old contents are scratch, and memory may be tight
    acc_ = DeviceBuffer<float>(floats);
  }
  if (states_.size() < partials) {
    states_.reset();
    states_ = DeviceBuffer<SoftmaxState>(partials);
  }
}

void decode_attention(DType kv, const float* q, const void* k_cache, const void* v_cache,
                      const int* n_ctx, const std::int64_t* base_row, const AttentionShape& shape,
                      float* out, AttentionWorkspace& workspace, StreamHandle stream,
                      int force_splits) {
  detail::launch_decode_attention(kv, q, k_cache, v_cache, n_ctx, ContiguousLocator{base_row},
                                  shape, out, workspace, stream, force_splits);
}

}  // namespace kvheap::cuda
