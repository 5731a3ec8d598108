// The decode-attention kernel body, templated on the cache's row locator; included by the .cu
// file of each layout (decode_attention.cu, paged_attention.cu, shared_prefix_attention.cu).
//
// Work: one block per (batch row i, KV head g, context split s); the block computes all query
// heads of g's group at once, so each K and V row is read from memory once for the whole group.
// (A group above 16 heads, or above 8 at a head_dim over 128, is cut into slices, one block each;
// every slice reads the rows again. No current Llama-family model has such a group except
// multi-query ones.)
//
// Mapping inside a block of 4 warps:
//   * Each lane holds 4 elements of a row at a time (one vector: 16 bytes of fp32 KV, 8 bytes of
//     fp16/bf16), whatever the KV type, so q and the accumulator take as many registers for a
//     16-bit cache as for an fp32 one. A position's K row for one head is VPR = head_dim / 4
//     vectors; LP = min(32, next power of two >= VPR) lanes share a position (a "lane group"),
//     and lane j of a group loads vectors j, j + LP, ... (lanes with j >= VPR idle when VPR is not
//     a power of two). A warp thus works on 32 / LP positions at once, the block on 4 x that many.
//   * Each lane keeps, per query head of the group, its slice of q and of the unnormalised output,
//     and the online-softmax state (running max m, running sum l) of its lane group's positions:
//     2 x G x head_dim / 32 floats of q and output, 128 at G = 16 and head_dim 128, the most that
//     leaves registers for the rest. Above head_dim 128 a block therefore holds at most 8 heads
//     (max_heads_per_block).
//   * The locator resolves a row's page-table or base lookups once, before the position loop
//     (Locator::rows_of); the loop then computes one address per position from registers.
//   * Per position: partial dot products over the lane's vectors, summed across the lane group
//     with __shfl_xor_sync (every lane gets the score), then one expf per head updates m, l, acc.
//     expf rather than __expf: the fast intrinsic's error grows with |x| and would use up the
//     1e-5 budget against the CPU twin; expf is within 2 ulp and costs little here, where the
//     loop waits on memory.
//     Every multiply-add is an explicit fma_rn and every product that feeds an add outside one
//     a mul_rn (host_device.hpp): two instantiations (contiguous, paged) then round alike
//     whatever nvcc unrolls or peels in each, which the chapters' bitwise claims rest on.
//     Loop bounds are warp-uniform so every lane reaches every shuffle; lanes whose position is
//     past the end just do not update.
//   * K and V of the next positions are loaded before the current one is used: kDepth positions
//     per lane in flight (4 where the group's registers leave room, else 2), in a ring of
//     registers that the unrolled loop indexes statically, since the loop is bound by memory
//     latency, not arithmetic.
//   * At the end the lane groups of a warp merge by xor shuffles, then warps merge in a tree
//     through shared memory, all with the log-sum-exp merge of attention_merge.hpp.
// Registers, spills and occupancy of every instantiation, as ptxas reports them:
// docs/results/kernel-resources.md (step 3 of scripts/test.sh fails on a spill).
// Split-K (flash-decoding): block s covers positions [n_ctx*s/S, n_ctx*(s+1)/S) and writes its
// state and unnormalised output to the workspace; a second kernel merges the S partials.
#pragma once

#include "device/cuda_compat.hpp"

#include <type_traits>

#include "kernels/attention_merge.hpp"
#include "kernels/block_sum.cuh"
#include "kernels/decode_attention.hpp"

// nvcc must unroll the fixed-trip loops over heads and vector elements so that the per-lane arrays
// live in registers; GCC (the simulator build) would only warn about the pragma.
#if defined(__CUDACC__)
#define KVHEAP_UNROLL _Pragma("unroll")
#else
#define KVHEAP_UNROLL
#endif

namespace kvheap::cuda::detail {

constexpr int kWarps = 4;  // per block: enough loads in flight, few enough to merge cheaply
constexpr int kThreads = kWarps * 32;

/// \brief Shapes and split count the kernel needs, passed by value.
struct KernelDims {
  int n, n_heads, n_kv_heads, head_dim;
  int group;            // query heads per KV head
  int heads_per_block;  // query heads of one block (<= the kernel's G)
  int chunks;           // blocks per (row, KV head)
  int splits;
  float scale;         // 1 / sqrt(head_dim)
  bool keep_partials;  // write raw partials even for one split (a caller merges them further)
};

/// \brief Lanes that share one position: the vectors of a row rounded up to a power of two, at
/// most 32.
KVHEAP_HD constexpr int lanes_per_position(int vectors_per_row) {
  int lp = 1;
  while (lp < vectors_per_row && lp < 32) lp *= 2;
  return lp;
}

/// \brief Elements of a row each lane holds at a time, for every KV type.
constexpr int kVecElems = 4;

/// \brief Bytes of dynamic shared memory a launch of G heads per block needs: the warps' tree
/// merge, [kWarps / 2][G] states and then [kWarps / 2][G][head_dim] accumulators (at most
/// 2 x 16 x 130 x 4 B = 16.6 KB, under the 48 KB a block may have without opting in).
constexpr std::size_t attention_smem_bytes(int g, int head_dim) {
  return static_cast<std::size_t>(kWarps / 2) * g * (head_dim + 2) * sizeof(float);
}

/// \brief Largest head_dim a kernel instantiation handles: HD when specialised; for the generic
/// one (HD = 0) 256, or 128 at G = 16, where 256 would give q and the accumulator 256 registers
/// per lane (max_heads_per_block keeps such groups to 8 heads per block).
constexpr int max_head_dim(int hd, int g) { return hd ? hd : g > 8 ? 128 : 256; }

/// \brief The cache's vector of kVecElems elements: 16 bytes of fp32, 8 of fp16 or bf16.
template <class T>
using KvVec = std::conditional_t<sizeof(T) == 4, uint4, uint2>;

/// \brief Widens one vector of the cache to fp32 (exact for every KV dtype).
template <class T>
__device__ __forceinline__ void widen(const KvVec<T>& raw, float (&out)[kVecElems]) {
  if constexpr (sizeof(T) == 4) {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  } else {
    const unsigned w[2] = {raw.x, raw.y};
    KVHEAP_UNROLL
    for (int j = 0; j < 2; ++j) {
      if constexpr (std::is_same_v<T, __half>) {  // element 2j sits in the low half-word
        out[2 * j] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[j] & 0xffffu)));
        out[2 * j + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[j] >> 16)));
      } else {  // bf16 is the top half of an fp32
        out[2 * j] = __uint_as_float(w[j] << 16);
        out[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
      }
    }
  }
}

/// \brief Attention of one (row, KV head, head slice, split) per block; see the file header.
/// HD: head_dim when specialised (64, 128), 0 for any multiple of 8 up to 256. G: query heads
/// per block rounded up to a power of two; unused heads repeat the last real one and are not
/// written.
/// \param q          [n, n_heads, head_dim]
/// \param k_cache    [rows, n_kv_heads, head_dim]
/// \param v_cache    [rows, n_kv_heads, head_dim]
/// \param n_ctx      [n]
/// \param out        [n, n_heads, head_dim], written when splits == 1 (and not keep_partials)
/// \param part_acc   [splits, n, n_heads, head_dim], written otherwise, unnormalised
/// \param part_state [splits, n, n_heads], written otherwise
template <class T, int HD, int G, class Locator>
__global__ void decode_attention_kernel(const float* q, const T* k_cache, const T* v_cache,
                                        const int* n_ctx, Locator loc, KernelDims d, float* out,
                                        float* part_acc, SoftmaxState* part_state) {
  constexpr int E = kVecElems;
  constexpr int VPL = (max_head_dim(HD, G) / E + 31) / 32;  // vectors per lane, at most
  // Positions in flight per lane: each costs 2 x VPL vectors of registers.
  constexpr int kDepth = G * VPL <= 4 ? 4 : 2;
  using Vec = KvVec<T>;
  const int head_dim = HD ? HD : d.head_dim;
  const int vpr = head_dim / E;
  const int lp = lanes_per_position(vpr);
  const int ppw = 32 / lp;  // positions per warp and step

  const int item = static_cast<int>(blockIdx.x);
  const int chunk = item % d.chunks;
  const int g = (item / d.chunks) % d.n_kv_heads;
  const int i = item / (d.chunks * d.n_kv_heads);
  const int split = static_cast<int>(blockIdx.y);
  const int head0 = g * d.group + chunk * d.heads_per_block;
  int heads = min(d.heads_per_block, d.group - chunk * d.heads_per_block);
  // A locator may say that only a row's first heads_of(i) heads of each group are real (chapter
  // 4's wide rows are padded to the widest group): a slice of padding only returns, before any
  // barrier, so the block reads nothing.
  if constexpr (requires { loc.heads_of(0); }) {
    heads = min(heads, loc.heads_of(item / (d.chunks * d.n_kv_heads)) - chunk * d.heads_per_block);
    if (heads <= 0) return;
  }
  const int ctx = n_ctx[i];
  const int t0 = static_cast<int>(static_cast<long long>(ctx) * split / d.splits);
  const int t1 = static_cast<int>(static_cast<long long>(ctx) * (split + 1) / d.splits);

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int sub = lane / lp;  // which of the warp's positions
  const int sl = lane % lp;   // lane within the lane group

  float qv[G][VPL][E];  // this lane's slices of the group's queries
  float acc[G][VPL][E];
  float m[G], l[G];
  KVHEAP_UNROLL
  for (int h = 0; h < G; ++h) {
    const float* qh =
        q + (static_cast<long long>(i) * d.n_heads + head0 + min(h, heads - 1)) * head_dim;
    m[h] = -INFINITY;
    l[h] = 0.0f;
    KVHEAP_UNROLL
    for (int v = 0; v < VPL; ++v) {
      const int vec = sl + v * lp;
      const float4 f = vec < vpr ? *reinterpret_cast<const float4*>(qh + vec * E)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      qv[h][v][0] = f.x;
      qv[h][v][1] = f.y;
      qv[h][v][2] = f.z;
      qv[h][v][3] = f.w;
      KVHEAP_UNROLL
      for (int e = 0; e < E; ++e) acc[h][v][e] = 0.0f;
    }
  }

  // The row's lookups (its base row, or its page table's start), once for the whole loop.
  using Rows = decltype(loc.rows_of(0));
  Rows rows{};
  if (t0 < t1) rows = loc.rows_of(i);

  const long long kv_dim = static_cast<long long>(d.n_kv_heads) * head_dim;
  const T* k_head = k_cache + static_cast<long long>(g) * head_dim;
  const T* v_head = v_cache + static_cast<long long>(g) * head_dim;
  auto load = [&](int t, Vec(&kr)[VPL], Vec(&vr)[VPL]) {
    if (t >= t1) return;
    const long long row = rows.at(t) * kv_dim;
    KVHEAP_UNROLL
    for (int v = 0; v < VPL; ++v) {
      const int vec = sl + v * lp;
      if (vec < vpr) {
        kr[v] = *reinterpret_cast<const Vec*>(k_head + row + vec * E);
        vr[v] = *reinterpret_cast<const Vec*>(v_head + row + vec * E);
      }
    }
  };
  // One position's update of every head's (m, l, acc); all lanes of the warp call it together.
  auto attend = [&](int t, const Vec(&kr)[VPL], const Vec(&vr)[VPL]) {
    float dot[G];
    KVHEAP_UNROLL
    for (int h = 0; h < G; ++h) dot[h] = 0.0f;
    KVHEAP_UNROLL
    for (int v = 0; v < VPL; ++v) {
      float kf[E];
      widen<T>(kr[v], kf);  // idle lanes hold zeros, so they add nothing
      KVHEAP_UNROLL
      for (int h = 0; h < G; ++h) KVHEAP_UNROLL
      for (int e = 0; e < E; ++e) dot[h] = fma_rn(qv[h][v][e], kf[e], dot[h]);
    }
    for (int off = lp / 2; off > 0; off /= 2) KVHEAP_UNROLL
    for (int h = 0; h < G; ++h) dot[h] += __shfl_xor_sync(kFullMask, dot[h], off);

    if (t < t1) {
      float vf[VPL][E];
      KVHEAP_UNROLL
      for (int v = 0; v < VPL; ++v) widen<T>(vr[v], vf[v]);
      KVHEAP_UNROLL
      for (int h = 0; h < G; ++h) {
        // One exp per head: whichever of (old max, new score) is smaller gets exp(-|diff|).
        const float s = mul_rn(dot[h], d.scale);
        const float e = expf(-fabsf(s - m[h]));
        const bool grows = s > m[h];
        const float alpha = grows ? e : 1.0f;  // rescales what was accumulated so far
        const float p = grows ? 1.0f : e;      // weight of this position
        m[h] = grows ? s : m[h];
        l[h] = fma_rn(l[h], alpha, p);
        KVHEAP_UNROLL
        for (int v = 0; v < VPL; ++v) KVHEAP_UNROLL
        for (int e2 = 0; e2 < E; ++e2) acc[h][v][e2] = fma_rn(p, vf[v][e2], acc[h][v][e2] * alpha);
      }
    }
  };

  // A ring of kDepth positions per lane: slot j % kDepth holds the j-th position of the warp.
  // The loop body is unrolled kDepth times, so every slot index is a constant and the ring
  // stays in registers; each step loads the position kDepth - 1 steps ahead, then uses its own.
  const int step = kWarps * ppw;
  Vec kr[kDepth][VPL] = {}, vr[kDepth][VPL] = {};
  const int first = t0 + warp * ppw;
  KVHEAP_UNROLL
  for (int j = 0; j + 1 < kDepth; ++j) load(first + sub + j * step, kr[j], vr[j]);
  // `base` is the same for all lanes of a warp, so all of them reach every shuffle.
  for (int base = first; base < t1; base += kDepth * step) {
    KVHEAP_UNROLL
    for (int j = 0; j < kDepth; ++j) {
      const int b = base + j * step;
      if (b >= t1) break;  // warp-uniform
      constexpr int ahead = kDepth - 1;
      load(b + sub + ahead * step, kr[(j + ahead) % kDepth], vr[(j + ahead) % kDepth]);
      attend(b + sub, kr[j], vr[j]);
    }
  }
  // Merges a partner's (state, accumulator slice) into this lane's, per head.
  auto merge_in = [&](int h, SoftmaxState other, auto&& partner_acc) {
    const MergeScales sc = merge_softmax(SoftmaxState{m[h], l[h]}, other);
    KVHEAP_UNROLL
    for (int v = 0; v < VPL; ++v) KVHEAP_UNROLL
    for (int e = 0; e < E; ++e) acc[h][v][e] = fma_rn(partner_acc(v, e), sc.b, acc[h][v][e] * sc.a);
    m[h] = sc.out.max;
    l[h] = sc.out.sum;
  };

  // 1. Lane groups of a warp: butterfly over the group index, so every group ends with the total.
  for (int off = lp; off < 32; off *= 2) {
    KVHEAP_UNROLL
    for (int h = 0; h < G; ++h) {
      const SoftmaxState other{__shfl_xor_sync(kFullMask, m[h], off),
                               __shfl_xor_sync(kFullMask, l[h], off)};
      float theirs[VPL][E];
      KVHEAP_UNROLL
      for (int v = 0; v < VPL; ++v) KVHEAP_UNROLL
      for (int e = 0; e < E; ++e) theirs[v][e] = __shfl_xor_sync(kFullMask, acc[h][v][e], off);
      merge_in(h, other, [&](int v, int e) { return theirs[v][e]; });
    }
  }

  // 2. Warps, in a tree through shared memory: [kWarps / 2][G] states, then [kWarps / 2][G][hd].
  float* smem = dynamic_smem<float>();
  float* smem_acc = smem + (kWarps / 2) * G * 2;
  for (int half = kWarps / 2; half >= 1; half /= 2) {
    if (warp >= half && warp < 2 * half && lane < lp) {
      const int slot = warp - half;
      KVHEAP_UNROLL
      for (int h = 0; h < G; ++h) {
        if (sl == 0) {
          smem[(slot * G + h) * 2] = m[h];
          smem[(slot * G + h) * 2 + 1] = l[h];
        }
        float* dst = smem_acc + (static_cast<long long>(slot) * G + h) * head_dim;
        KVHEAP_UNROLL
        for (int v = 0; v < VPL; ++v)
          if (sl + v * lp < vpr) KVHEAP_UNROLL
        for (int e = 0; e < E; ++e) dst[(sl + v * lp) * E + e] = acc[h][v][e];
      }
    }
    __syncthreads();
    if (warp < half && lane < lp) {
      KVHEAP_UNROLL
      for (int h = 0; h < G; ++h) {
        const float* src = smem_acc + (static_cast<long long>(warp) * G + h) * head_dim;
        merge_in(h, SoftmaxState{smem[(warp * G + h) * 2], smem[(warp * G + h) * 2 + 1]},
                 [&](int v, int e) {
                   const int vec = sl + v * lp;
                   return vec < vpr ? src[vec * E + e] : 0.0f;
                 });
      }
    }
    __syncthreads();
  }

  // 3. Warp 0's first lane group holds the block's result.
  if (warp != 0 || lane >= lp) return;
  KVHEAP_UNROLL
  for (int h = 0; h < G; ++h) {
    if (h >= heads) break;
    const long long head_row = static_cast<long long>(i) * d.n_heads + head0 + h;
    const long long part_row = static_cast<long long>(split) * d.n * d.n_heads + head_row;
    const bool final = d.splits == 1 && !d.keep_partials;
    float* dst = final ? out + head_row * head_dim : part_acc + part_row * head_dim;
    // Single pass: normalise now (an empty context, l = 0, gives zeros). Split: keep it raw.
    const float scale = final ? (l[h] > 0.0f ? 1.0f / l[h] : 0.0f) : 1.0f;
    KVHEAP_UNROLL
    for (int v = 0; v < VPL; ++v) {
      const int vec = sl + v * lp;
      if (vec >= vpr) continue;
      *reinterpret_cast<float4*>(dst + vec * E) = make_float4(
          acc[h][v][0] * scale, acc[h][v][1] * scale, acc[h][v][2] * scale, acc[h][v][3] * scale);
    }
    if (!final && sl == 0) part_state[part_row] = SoftmaxState{m[h], l[h]};
  }
}

}  // namespace kvheap::cuda::detail
