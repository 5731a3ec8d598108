// The prefix pass of shared-prefix attention as a tensor-core product (chapter 4, 16-bit caches):
// included by shared_prefix_attention.cu, which picks it over the decode kernel where it runs.
//
// Work: one block per (group, KV head, slice of at most 128 query rows, context split). The query
// rows of a KV head are the group's rows x the model's query heads per KV head: at 32 samples of
// Llama-3-8B (4 query heads per KV head) one block holds all 128 and reads the prefix once for
// them, where the decode kernel reads it once per 16 heads. Each warp holds 16 of the rows.
//
// Memory to shared memory: tiles of 32 positions of K and V, 16 KiB at head_dim 128, three in
// flight while one is computed (cp.async), each row padded by 16 bytes so that the fragment loads
// below fall in distinct banks. The block's 68 KiB need the opt-in above 48 KiB.
//
// Shared memory to registers, per warp and tile:
//   S = Q Kᵀ: 4 n-tiles of 8 positions x head_dim / 16 products of m16n8k16. The queries, scaled
//     by 1/sqrt(head_dim) x log2(e) and rounded to the cache type, stay in registers as A
//     fragments for the whole split; K's B fragments come by ldmatrix, four 8 x 8 blocks (two
//     k-steps) an instruction.
//   online softmax: each lane holds two rows' scores; the 4 lanes of a row share its maximum
//     (two shuffles); the running sums and outputs are rescaled by exp2(old max - new max).
//   O += P V: the weights, rounded to the cache type, are already the A fragments of the next
//     product (see kernels/mma.cuh); V's B fragments come by ldmatrix.trans, which transposes
//     its 8 x 8 blocks on the way (two output n-tiles an instruction).
// The sums add the rounded weights, the same ones the product multiplies, so the output stays a
// weighted mean of V rows. Against plain attention the result differs by the rounding of the
// queries and weights to 16 bits (8 significant bits for bf16, 11 for fp16): tier 2.
//
// The block writes the same unnormalised partial states as the decode kernel with keep_partials,
// so shared_prefix_attention.cu's merge takes either.
#pragma once

#include "device/cuda_compat.hpp"

#include "kernels/decode_attention.cuh"
#include "kernels/mma.cuh"

namespace kvheap::cuda::detail {

constexpr int kProductTile = 32;   // positions a tile
constexpr int kProductStages = 4;  // tiles in shared memory: one computed, three loading
constexpr int kProductWarps = 8;   // at most, 16 query rows each
constexpr int kProductRows = kProductWarps * 16;  // query rows of a block, at most
/// \brief Elements of one staged K or V row at `head_dim`: 8 more, 16 bytes of padding.
constexpr int product_row(int head_dim) { return head_dim + 8; }
/// \brief Bytes of dynamic shared memory of one block: K and V of kProductStages tiles.
constexpr std::size_t product_smem_bytes(int head_dim) {
  return static_cast<std::size_t>(kProductStages) * 2 * kProductTile * product_row(head_dim) * 2;
}

/// \brief Sizes of one launch of prefix_product_kernel, passed by value.
struct ProductDims {
  int groups;      // G
  int n_kv_heads;  // KV heads
  int wide_heads;  // query rows of one group: n_heads x widest
  int per_kv;      // query rows of one KV head of one group: widest x (query heads per KV head)
  int slices;      // blocks per (group, KV head)
  int slice_rows;  // query rows of a slice (the last slice may hold fewer)
  int splits;      // blocks per (group, KV head, slice) along the context
  int group;       // query heads per KV head of one batch row
  float scale;     // 1 / sqrt(head_dim)
};

/// \brief The prefix pass of one (group, KV head, slice, split) per block; see the file header.
/// T: __half or __nv_bfloat16; HD: head_dim, 64 or 128. blockDim.x: 32 x ceil(slice_rows / 16).
/// \param wide_q      [G, wide_heads, HD] fp32: query row m of KV head h is wide head h x per_kv +
/// m \param k_cache     [num_blocks, block_size, n_kv_heads, HD] one layer \param v_cache     same
/// layout \param prefix_len  [G] positions each group shares \param prefix_begin [G] the first of
/// them \param group_size  [G] batch rows of each group: its real query rows are group_size x group
/// \param pages       the page tables, with row_seq mapping group g to the sequence it reads
/// \param part_acc    [splits, G, wide_heads, HD] unnormalised outputs, written for real rows
/// \param part_state  [splits, G, wide_heads] their (max, sum), written for real rows
template <class T, int HD>
__global__ void __launch_bounds__(kProductWarps * 32)
    prefix_product_kernel(const float* wide_q, const T* k_cache, const T* v_cache,
                          const int* prefix_len, const int* prefix_begin, const int* group_size,
                          PagedLocator pages, ProductDims d, float* part_acc,
                          SoftmaxState* part_state) {
  constexpr int kRow = product_row(HD);
  constexpr int KS = HD / 16;                                    // k-steps of Q Kᵀ
  constexpr int NT = kProductTile / 8;                           // n-tiles of S
  constexpr int DT = HD / 8;                                     // n-tiles of O
  constexpr int kVecs = HD * 2 / 16;                             // 16-byte vectors a row
  static_assert(sizeof(T) == 2 && HD % 32 == 0 && NT % 2 == 0);  // k-steps and n-tiles in pairs

  const int item = static_cast<int>(blockIdx.x);
  const int slice = item % d.slices;
  const int h = (item / d.slices) % d.n_kv_heads;
  const int g = item / (d.slices * d.n_kv_heads);
  const int split = static_cast<int>(blockIdx.y);
  const int real = min(group_size[g] * d.group, d.per_kv);  // the group's real rows
  const int r0 = slice * d.slice_rows;
  const int r1 = min(r0 + d.slice_rows, real);
  if (r0 >= r1) return;  // a slice of padding reads nothing (the whole block, before any barrier)
  const int ctx = prefix_len[g], begin = prefix_begin[g];
  const int t0 = static_cast<int>(static_cast<long long>(ctx) * split / d.splits);
  const int t1 = static_cast<int>(static_cast<long long>(ctx) * (split + 1) / d.splits);

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int gid = lane / 4, t = lane % 4;  // the lane's row group and place in it
  const int m0 = r0 + warp * 16;           // the warp's first query row
  const bool active = m0 < r1;             // warp-uniform: a warp past the slice only stages

  // The warp's queries as A fragments, for every k-step; rows past the slice are zeros.
  const float q_scale = mul_rn(d.scale, 1.44269504088896341f);  // log2(e): base-2 scores
  const float* qg = wide_q + (static_cast<long long>(g) * d.wide_heads + h * d.per_kv) * HD;
  unsigned qa[KS][4];
  KVHEAP_UNROLL
  for (int ks = 0; ks < KS; ++ks) {
    KVHEAP_UNROLL
    for (int r = 0; r < 4; ++r) {
      const int row = m0 + gid + 8 * (r % 2), col = ks * 16 + 2 * t + 8 * (r / 2);
      const float2 v = row < r1 ? *reinterpret_cast<const float2*>(qg + row * HD + col)
                                : make_float2(0.0f, 0.0f);
      qa[ks][r] = pack2<T>(mul_rn(v.x, q_scale), mul_rn(v.y, q_scale));
    }
  }
  float o[DT][4];
  KVHEAP_UNROLL
  for (int dt = 0; dt < DT; ++dt) KVHEAP_UNROLL
  for (int i = 0; i < 4; ++i) o[dt][i] = 0.0f;
  float mx[2] = {kNoScore, kNoScore}, sum[2] = {0.0f, 0.0f};  // rows gid and gid + 8

  const auto rows = pages.rows_of(g);
  const int row_bytes = d.n_kv_heads * HD * 2;
  const char* k_head = reinterpret_cast<const char*>(k_cache + static_cast<long long>(h) * HD);
  const char* v_head = reinterpret_cast<const char*>(v_cache + static_cast<long long>(h) * HD);
  T* stages = dynamic_smem<T>();  // [kProductStages][K, V][kProductTile][kRow]
  const SharedAddress stage0 = shared_address(stages);

  // Queues tile [ts, ts + kProductTile) into stage s; positions from t1 on get zeros.
  auto issue = [&](int ts, int s) {
    for (int c = tid; c < kProductTile * kVecs; c += static_cast<int>(blockDim.x)) {
      const int p = c / kVecs, vec = c % kVecs;
      const bool real_pos = ts + p < t1;
      const long long row = rows.at(begin + (real_pos ? ts + p : t1 - 1)) * row_bytes;
      const SharedAddress dst =
          stage0 + static_cast<int>((((s * 2) * kProductTile + p) * kRow + vec * 8) * 2);
      copy16_async(dst, k_head + row + vec * 16, real_pos);
      copy16_async(dst + kProductTile * kRow * 2, v_head + row + vec * 16, real_pos);
    }
  };

  // One tile of the warp's 16 rows.
  auto compute = [&](int ts, int s) {
    const T* ks_base = stages + (s * 2) * kProductTile * kRow;
    const auto* k16 = reinterpret_cast<const unsigned short*>(ks_base);
    const auto* v16 = k16 + kProductTile * kRow;
    // ldmatrix: lane 8j + r names row r of matrix j. For K, matrices j = 0..3 are dims
    // [16 ks + 8 j, + 8) of 8 positions: the B registers of k-steps ks and ks + 1.
    const int lr = lane % 8, lj = lane / 8;
    float sc[NT][4];
    KVHEAP_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      KVHEAP_UNROLL
      for (int i = 0; i < 4; ++i) sc[nt][i] = 0.0f;
      const unsigned short* krow = k16 + (nt * 8 + lr) * kRow + 8 * lj;
      KVHEAP_UNROLL
      for (int ks = 0; ks < KS; ks += 2) {
        unsigned kb[4];
        ldmatrix_x4<false>(kb, krow + ks * 16);
        const unsigned b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
        mma_16816<T>(sc[nt], qa[ks], b0);
        mma_16816<T>(sc[nt], qa[ks + 1], b1);
      }
    }
    float top[2] = {-INFINITY, -INFINITY};
    KVHEAP_UNROLL
    for (int nt = 0; nt < NT; ++nt) KVHEAP_UNROLL
    for (int i = 0; i < 4; ++i) {
      if (ts + nt * 8 + 2 * t + i % 2 >= t1) sc[nt][i] = -INFINITY;  // past the split
      top[i / 2] = fmaxf(top[i / 2], sc[nt][i]);
    }
    KVHEAP_UNROLL
    for (int r = 0; r < 2; ++r) {
      top[r] = fmaxf(top[r], __shfl_xor_sync(kFullMask, top[r], 1));
      top[r] = fmaxf(top[r], __shfl_xor_sync(kFullMask, top[r], 2));
      const float next = fmaxf(mx[r], top[r]);
      const float alpha = exp2_ftz(mx[r] - next);  // 1 when the maximum stays
      sum[r] = mul_rn(sum[r], alpha);
      KVHEAP_UNROLL
      for (int dt = 0; dt < DT; ++dt) {
        o[dt][2 * r] = mul_rn(o[dt][2 * r], alpha);
        o[dt][2 * r + 1] = mul_rn(o[dt][2 * r + 1], alpha);
      }
      mx[r] = next;
    }
    // The weights of k-step j (positions 16j .. 16j + 15) are n-tiles 2j and 2j + 1 of S.
    unsigned pa[NT / 2][4];
    KVHEAP_UNROLL
    for (int nt = 0; nt < NT; ++nt) {
      KVHEAP_UNROLL
      for (int r = 0; r < 2; ++r) {  // a masked score weighs exp2(-inf) = 0
        const unsigned w =
            pack2<T>(exp2_ftz(sc[nt][2 * r] - mx[r]), exp2_ftz(sc[nt][2 * r + 1] - mx[r]));
        sum[r] += unpack<T>(w, false) + unpack<T>(w, true);
        pa[nt / 2][2 * (nt % 2) + r] = w;
      }
    }
    // For V (transposed on the way), matrices j = 0..3 are positions [16 k + 8 (j % 2), + 8) of
    // dims [8 dt + 8 (j / 2), + 8): the B registers of output n-tiles dt and dt + 1.
    KVHEAP_UNROLL
    for (int dt = 0; dt < DT; dt += 2) {
      KVHEAP_UNROLL
      for (int k = 0; k < NT / 2; ++k) {
        unsigned vb[4];
        ldmatrix_x4<true>(vb, v16 + (k * 16 + 8 * (lj % 2) + lr) * kRow + dt * 8 + 8 * (lj / 2));
        const unsigned b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
        mma_16816<T>(o[dt], pa[k], b0);
        mma_16816<T>(o[dt + 1], pa[k], b1);
      }
    }
  };

  // The split's tiles through the pipeline: tiles k + 1 .. k + kProductStages - 1 load while
  // tile k is computed. Tile k + kProductStages - 1 goes to the stage of tile k - 1, which every
  // warp finished before the barrier of step k.
  const int tiles = (t1 - t0 + kProductTile - 1) / kProductTile;
  KVHEAP_UNROLL
  for (int k = 0; k + 1 < kProductStages; ++k) {
    if (k < tiles) issue(t0 + k * kProductTile, k);
    __pipeline_commit();
  }
  for (int k = 0; k < tiles; ++k) {
    __pipeline_wait_prior(kProductStages - 2);  // this thread's copies of tile k have landed
    __syncthreads();  // everyone's have, and tile k - 1's stage is free again
    const int next = k + kProductStages - 1;
    if (next < tiles) issue(t0 + next * kProductTile, next % kProductStages);
    __pipeline_commit();
    if (active) compute(t0 + k * kProductTile, k % kProductStages);
  }
  __pipeline_wait_prior(0);
  if (!active) return;

  // Each lane summed its own columns; the 4 lanes of a row hold the same maximum.
  KVHEAP_UNROLL
  for (int r = 0; r < 2; ++r) {
    sum[r] += __shfl_xor_sync(kFullMask, sum[r], 1);
    sum[r] += __shfl_xor_sync(kFullMask, sum[r], 2);
  }
  KVHEAP_UNROLL
  for (int r = 0; r < 2; ++r) {
    const int row = m0 + gid + 8 * r;
    if (row >= r1) continue;
    const long long part =
        (static_cast<long long>(split) * d.groups + g) * d.wide_heads + h * d.per_kv + row;
    float* dst = part_acc + part * HD + 2 * t;
    KVHEAP_UNROLL
    for (int dt = 0; dt < DT; ++dt)
      *reinterpret_cast<float2*>(dst + dt * 8) = make_float2(o[dt][2 * r], o[dt][2 * r + 1]);
    // Back to natural-log units, and -inf for a split that saw no position, as the merge expects.
    if (t == 0)
      part_state[part] = SoftmaxState{
          mx[r] == kNoScore ? -INFINITY : mul_rn(mx[r], 0.693147180559945309f), sum[r]};
  }
}

}  // namespace kvheap::cuda::detail
