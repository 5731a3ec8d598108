// CPU matrix products for the forward pass: weights packed once into panels, an outer-product
// kernel that keeps a block of outputs in vector registers, and OpenMP across the panels.
//
// The kernel takes MR batch rows and one panel of NR vectors' worth of output columns. For each
// input index k it loads the panel's NR weight vectors once, and for each of the MR rows
// broadcasts x[row, k] and does NR multiply-adds: MR x NR accumulators, NR + MR loads per MR x NR
// multiply-adds. With 32 vector registers 8 rows x 3 vectors (24 accumulators) leave room for the
// loads; with 16, 6 rows x 2 vectors. On 2 threads of an AVX-512 Xeon that beat 6 x 4, 4 x 4,
// 8 x 2, 10 x 2 and 12 x 2, and blocking over k did not pay (bench/bench_matmul_cpu.cpp compares
// the kernel with Eigen's product and a BLAS; docs/results/ has its tables).
//
// The panel layout makes every product, one row or 512, read the weights front to back: the
// first block of rows reads a panel from memory, the others from L2. Each loaded weight vector
// serves MR rows from registers. Left to the hardware prefetchers, the first block waited on
// memory while the others computed, so the blocks fetch ahead in software (see product()): over
// stories110m's matrices on that Xeon a pass of 16 rows went from 40 to 26 ms, and a bf16 decode
// step from 10.6 to 8.7 ms. No output element is split into partial sums: a lane accumulates
// x[r, k] W[j, k] for k in order, so the result never depends on the batch or the thread count.
//
// bf16 weights are the top halves of fp32 ones: a panel stores, for each k, pairs of columns in
// one 32-bit word (column c in the low half, column c + P in the high half, P floats per vector),
// so one load and a shift or a mask give two vectors of fp32 in column order. fp16 weights are
// widened by the F16C instruction where the target has it.
#include "kernels/matmul.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <Eigen/Core>
#if defined(__F16C__) || defined(__AVX512BF16__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/error.hpp"
#include "base/half.hpp"

namespace kvheap::cpu {

namespace {

using Packet = Eigen::internal::packet_traits<float>::type;
constexpr int kP = Eigen::internal::packet_traits<float>::size;  // floats per vector
constexpr bool kManyRegisters = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32;
/// The bits of one vector of floats as 32-bit words (GCC and Clang vector extension).
using Words = std::uint32_t __attribute__((vector_size(kP * sizeof(std::uint32_t))));

/// Storage element of each weight dtype.
struct Bf16 {
  std::uint16_t bits;
};
struct Fp16 {
  std::uint16_t bits;
};
/// bf16 weights for AVX512-BF16's dot products: W[j, 2i] and W[j, 2i + 1] in one 32-bit word
/// (low and high half), which vdpbf16ps multiplies by the same pair of the activations.
struct Bf16Pair {
  std::uint32_t bits;
};

/// AVX512-BF16 is there to run Bf16Pair.
#if defined(__AVX512BF16__) && defined(__AVX512F__)
constexpr bool kPairsBuilt = true;
#else
constexpr bool kPairsBuilt = false;
#endif

/// The activations' element as the kernel reads them: fp32, or bf16 pairs for Bf16Pair.
template <class T>
using Activation = std::conditional_t<std::is_same_v<T, Bf16Pair>, std::uint32_t, float>;
/// Input indices a step takes: one, or a pair for Bf16Pair.
template <class T>
constexpr int kPerStep = std::is_same_v<T, Bf16Pair> ? 2 : 1;

/// Block shape per element type: NR weight vectors per k, MR batch rows.
template <class T>
struct Tile {
  static constexpr int kNR = kManyRegisters ? 3 : 2;
  static constexpr int kMR = kManyRegisters ? 8 : 6;
};
/// bf16 widens two vectors from one load, so it takes them in pairs.
template <>
struct Tile<Bf16> {
  static constexpr int kNR = kManyRegisters ? 4 : 2;
#if defined(__clang__)
  static constexpr int kMR = kManyRegisters ? 5 : 6;  // at 6 x 4 Clang 14 keeps sums on the stack
#else
  static constexpr int kMR = 6;
#endif
};

template <class T>
constexpr int kWidth = Tile<T>::kNR* kP;  // columns per panel

/// Where W[j, k] (column c of its panel) is stored within the panel's step k, in elements.
template <class T>
int slot(int c) {
  if constexpr (std::is_same_v<T, Bf16>) {
    const int pair = c / (2 * kP), in_pair = c % (2 * kP);
    // The first vector of the pair in each word's low half, which is its second element on a
    // big-endian machine.
    const int half = std::endian::native == std::endian::little ? in_pair / kP : 1 - in_pair / kP;
    return 2 * (pair * kP + in_pair % kP) + half;
  } else {
    return c;
  }
}

/// The bf16 pair (lo, hi) as vdpbf16ps reads it.
std::uint32_t bf16_pair(float lo, float hi) {
  return float_to_bf16(lo) | static_cast<std::uint32_t>(float_to_bf16(hi)) << 16;
}

template <class T>
T narrow(float v) {
  if constexpr (std::is_same_v<T, Bf16>)
    return {float_to_bf16(v)};
  else if constexpr (std::is_same_v<T, Fp16>)
    return {float_to_fp16(v)};
  else
    return v;
}

/// The NR weight vectors of one step, widened to fp32.
template <class T>
void load_step(const T* p, Packet (&b)[Tile<T>::kNR]) {
  constexpr int kNR = Tile<T>::kNR;
  if constexpr (std::is_same_v<T, float>) {
#pragma GCC unroll 8
    for (int v = 0; v < kNR; ++v) b[v] = Eigen::internal::pload<Packet>(p + v * kP);
  } else if constexpr (std::is_same_v<T, Bf16Pair>) {  // the pairs' bits, for vdpbf16ps
#pragma GCC unroll 8
    for (int v = 0; v < kNR; ++v)
      b[v] = Eigen::internal::pload<Packet>(reinterpret_cast<const float*>(p + v * kP));
  } else if constexpr (std::is_same_v<T, Bf16>) {
#pragma GCC unroll 8
    for (int v = 0; v < kNR; v += 2) {
      Words w;
      std::memcpy(&w, p + v * kP, sizeof w);
      b[v] = std::bit_cast<Packet>(Words(w << 16));
      b[v + 1] = std::bit_cast<Packet>(Words(w & 0xffff0000u));
    }
  } else {
#pragma GCC unroll 8
    for (int v = 0; v < kNR; ++v) {
#if defined(__F16C__) && defined(__AVX512F__)
      // The zero-masked form with every lane kept: the plain one starts from GCC 12's
      // _mm512_undefined_ps, which -Wuninitialized flags at -O1.
      b[v] =
          _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xFFFF),
                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + v * kP)));
#elif defined(__F16C__) && defined(__AVX__)
      b[v] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + v * kP)));
#else
      std::array<float, kP> f;
      for (int l = 0; l < kP; ++l) f[l] = fp16_to_float(p[v * kP + l].bits);
      b[v] = Eigen::internal::ploadu<Packet>(f.data());
#endif
    }
  }
}

/// Lines fetched into L2 ahead of the kernel: every `every` steps, kAhead lines from `at`, then
/// `stride` bytes on, `fetches` times.
struct Ahead {
  const char* at = nullptr;
  long stride = 0;
  int fetches = 0;  // those whose lines lie in this thread's panels
  int every = 1;
};

/// acc += a b for one row's broadcast activation and one weight vector: a multiply-add, or for
/// Bf16Pair two products of a pair (vdpbf16ps).
template <class T>
Packet madd(Activation<T> a, const Packet& b, const Packet& acc) {
  if constexpr (std::is_same_v<T, Bf16Pair>) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    return _mm512_dpbf16_ps(acc, std::bit_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a))),
                            std::bit_cast<__m512bh>(b));
#else
    static_assert(!kPairsBuilt);
    return acc;  // never compiled: with_element takes Bf16Pair only where it is built
#endif
  } else {
    return Eigen::internal::pmadd(Eigen::internal::pset1<Packet>(a), b, acc);
  }
}

/// out[MR rows, cols] = x[MR rows, :] W_panel^T: the outputs of MR batch rows and one panel over
/// `steps` steps, fetching kAhead lines every `ahead.every` steps into L2 as `ahead` says. Out of
/// line, one call per block of steps: every instantiation is then a function of its own, whose
/// loops tests/kernels/check_product_loop.py reads.
template <class T, int MR, int kAhead>
__attribute__((noinline)) void block(const Activation<T>* x, long ldx, const T* panel, int steps,
                                     float* out, long ldo, int cols, Ahead ahead) {
  using Eigen::internal::pset1;
  constexpr int kNR = Tile<T>::kNR;
  Packet acc[MR][kNR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < kNR; ++v) acc[i][v] = pset1<Packet>(0.0f);
  const auto step = [&](int k) __attribute__((always_inline)) {
    Packet b[kNR];
    load_step<T>(panel + static_cast<long>(k) * kWidth<T>, b);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const Activation<T> a = x[i * ldx + k];
#pragma GCC unroll 8
      for (int v = 0; v < kNR; ++v) acc[i][v] = madd<T>(a, b[v], acc[i][v]);
    }
  };
  int k = 0;
  // The steps that fetch, each followed by `every` - 1 that do not, in one loop with a branch:
  // written as a loop of fetches around a loop of steps, it made GCC 12 keep some of the sums on
  // the stack, read and written every step (docs/results/matmul-cpu-amd-epyc-zen4.md has what
  // that cost; tests/kernels/check_product_loop.py fails on it).
  if constexpr (kAhead > 0) {
    const char* at = ahead.at;
    const int fetching = static_cast<int>(
        std::min(static_cast<long>(steps), static_cast<long>(ahead.fetches) * ahead.every));
#if defined(__clang__)
#pragma clang loop unroll(disable)  // unrolled, Clang 14 keeps sums on the stack here too
#endif
    for (int next = 0; k < fetching; ++k) {
      if (k == next) {
#pragma GCC unroll 4
        for (int l = 0; l < kAhead; ++l) __builtin_prefetch(at + l * 64, 0, 2);  // 2: into L2
        next += ahead.every;
        if (next < fetching) at += ahead.stride;
      }
      step(k);
    }
  }
  for (; k < steps; ++k) step(k);
  if (cols == kWidth<T>) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < kNR; ++v) Eigen::internal::pstoreu(out + i * ldo + v * kP, acc[i][v]);
    return;
  }
  for (int i = 0; i < MR; ++i) {  // the last panel's padding columns are not written
    alignas(64) std::array<float, kWidth<T>> row;
    for (int v = 0; v < kNR; ++v) Eigen::internal::pstore(row.data() + v * kP, acc[i][v]);
    std::copy_n(row.data(), cols, out + i * ldo);
  }
}

/// block<T, MR, kAhead> for MR = rows, 1 <= rows <= R, and kAhead = lines (at most 3; none
/// when ahead.at is null).
template <class T, int R>
void any_block(int rows, int lines, const Activation<T>* x, long ldx, const T* panel, int steps,
               float* out, long ldo, int cols, Ahead ahead) {
  if constexpr (R > 0) {
    if (rows != R)
      return any_block<T, R - 1>(rows, lines, x, ldx, panel, steps, out, ldo, cols, ahead);
    if (ahead.at == nullptr) lines = 0;
    switch (lines) {
      case 0: return block<T, R, 0>(x, ldx, panel, steps, out, ldo, cols, ahead);
      case 1: return block<T, R, 1>(x, ldx, panel, steps, out, ldo, cols, ahead);
      case 2: return block<T, R, 2>(x, ldx, panel, steps, out, ldo, cols, ahead);
      default: return block<T, R, 3>(x, ldx, panel, steps, out, ldo, cols, ahead);
    }
  }
}

/// The activations as block<T> reads them: x itself, or for Bf16Pair its rows rounded to bf16
/// pairs in `pairs` ([n, steps]).
template <class T>
const Activation<T>* activations(const float* x, int n, int in_dim, int steps,
                                 std::vector<std::uint32_t>& pairs) {
  if constexpr (std::is_same_v<T, Bf16Pair>) {
    pairs.resize(static_cast<std::size_t>(n) * steps);
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < steps; ++i) {
        const float* xr = x + static_cast<long>(r) * in_dim;
        const int k = 2 * i;
        pairs[static_cast<std::size_t>(r) * steps + i] =
            bf16_pair(xr[k], k + 1 < in_dim ? xr[k + 1] : 0.0f);
      }
    return pairs.data();
  } else {
    (void)n, (void)in_dim, (void)steps, (void)pairs;
    return x;
  }
}

template <class T>
void product(float* out, const float* x_in, const PackedMatrix& w, int n) {
  constexpr int kMR = Tile<T>::kMR;
  const int in_dim = w.in_dim(), out_dim = w.out_dim(), panels = w.panels();
  const int steps = (in_dim + kPerStep<T> - 1) / kPerStep<T>;
  thread_local std::vector<std::uint32_t> pairs;
  const Activation<T>* x = activations<T>(x_in, n, in_dim, steps, pairs);
  const long ld = steps;
  const bool parallel = static_cast<long>(n) * in_dim * out_dim >= kParallelMacs;
#pragma omp parallel if (parallel)
  {
    // Contiguous ranges of panels: each thread streams its own part of the weights.
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int q0 = static_cast<int>(static_cast<long>(panels) * t / nt);
    const int q1 = static_cast<int>(static_cast<long>(panels) * (t + 1) / nt);
    // What the blocks fetch into L2 ahead of their loads. A product of one block of rows streams
    // each panel from memory: it fetches the lines 4 KiB ahead of those it reads. With several
    // blocks, all of them read the panel from L2 while they fetch the next one, a share each,
    // spread evenly over their steps: its memory stream then overlaps all of the arithmetic.
    // (Fetching a line or more every step, so that the first blocks fetched it all, left memory
    // idle in the others: on 2 cores of a Zen 3 EPYC, a stories110m pass of 32 rows went from
    // 0.59-0.61 to 0.62-0.69 of the multiply-add peak, of 16 rows from 0.43-0.46 to 0.45-0.54.)
    constexpr long kStepBytes = kWidth<T> * static_cast<long>(sizeof(T));
    constexpr int kStepLines = static_cast<int>((kStepBytes + 63) / 64);
    static_assert(kStepLines <= 3, "any_block fetches at most 3 lines a step");
    const int blocks = (n + kMR - 1) / kMR;
    const long panel_bytes = steps * kStepBytes;
    // The next panel's lines shared out evenly over the blocks' steps: `lines` at a time, every
    // `every` steps.
    const long panel_lines = (panel_bytes + 63) / 64;
    const long block_steps = static_cast<long>(blocks) * steps;
    const int lines =
        blocks == 1 ? kStepLines
                    : static_cast<int>(std::clamp((panel_lines + block_steps - 1) / block_steps, 1L,
                                                  static_cast<long>(kStepLines)));
    const int every =
        blocks == 1
            ? 1
            : static_cast<int>(std::max(1L, block_steps * lines / std::max(panel_lines, 1L)));
    for (int q = q0; q < q1; ++q) {
      const auto* panel = static_cast<const T*>(w.panel(q));
      const auto* start = static_cast<const char*>(w.panel(q));
      const int j = q * kWidth<T>;
      const int cols = std::min(kWidth<T>, out_dim - j);
      long fetched = 0;  // bytes of the next panel that the blocks before this one fetch
      for (int i = 0; i < n; i += kMR) {
        Ahead ahead;
        const auto steps_within = [&](long bytes, long stride) {  // of the steps, those in range
          return static_cast<int>(std::clamp(bytes / stride, 0L, static_cast<long>(steps)));
        };
        if (blocks == 1 && (q1 - q) * panel_bytes > 4096)  // a pointer only into the panels
          ahead = {start + 4096, kStepBytes,
                   steps_within((q1 - q) * panel_bytes - 4096, kStepBytes), 1};
        else if (q + 1 < q1 && fetched < panel_bytes)
          ahead = {start + panel_bytes + fetched, lines * 64L,
                   steps_within(panel_bytes - fetched, lines * 64L), every};
        any_block<T, kMR>(std::min(kMR, n - i), lines, x + i * ld, ld, panel, steps,
                          out + i * static_cast<long>(out_dim) + j, out_dim, cols, ahead);
        fetched += (steps + every - 1) / every * lines * 64L;
      }
    }
  }
}

template <class T>
void pack(unsigned char* dst, const float* w, int out_dim, int in_dim, int panels) {
  constexpr int kW = kWidth<T>;
  const int steps = (in_dim + kPerStep<T> - 1) / kPerStep<T>;
  std::array<int, kW> slots;
  for (int c = 0; c < kW; ++c) slots[c] = slot<T>(c);
#pragma omp parallel for schedule(static)
  for (int q = 0; q < panels; ++q) {
    T* p = reinterpret_cast<T*>(dst) + static_cast<std::size_t>(q) * kW * steps;
    const int cols = std::min(kW, out_dim - q * kW);
    for (int c = 0; c < kW; ++c) {  // W's rows one at a time, each read front to back
      const float* row = w + static_cast<std::size_t>(q * kW + c) * in_dim;
      const auto at = [&](int k) { return c < cols && k < in_dim ? row[k] : 0.0f; };
      for (int i = 0; i < steps; ++i) {
        T& e = p[static_cast<std::size_t>(i) * kW + slots[c]];
        if constexpr (std::is_same_v<T, Bf16Pair>)
          e = {bf16_pair(at(2 * i), at(2 * i + 1))};
        else
          e = narrow<T>(at(i));
      }
    }
  }
}

/// Calls f(T{}) with T the storage element of weight dtype `d` (bf16 as `bf16` says).
template <class F>
void with_element(DType d, Bf16Products bf16, F&& f) {
  switch (d) {
    case DType::F32: f(float{}); break;
    case DType::BF16:
      if (bf16 != Bf16Products::kPairs) {
        f(Bf16{});
      } else if constexpr (kPairsBuilt) {  // elsewhere no pairs kernel is compiled at all
        f(Bf16Pair{});
      } else {
        throw InputError(
            "bf16 products by pairs (vdpbf16ps) need a build for a CPU with AVX512-BF16; this one "
            "widens bf16 weights to fp32 instead");
      }
      break;
    case DType::F16: f(Fp16{}); break;
  }
}

}  // namespace

bool bf16_pairs_built() { return kPairsBuilt; }

std::size_t PackedMatrix::bytes_for(int out_dim, int in_dim, DType dtype, Bf16Products bf16) {
  std::size_t bytes = 0;
  with_element(dtype, bf16, [&](auto t) {
    using T = decltype(t);
    const auto panels = static_cast<std::size_t>((out_dim + kWidth<T> - 1) / kWidth<T>);
    const auto steps = static_cast<std::size_t>((in_dim + kPerStep<T> - 1) / kPerStep<T>);
    bytes = panels * kWidth<T> * steps * sizeof(T);
  });
  return bytes;
}

PackedMatrix::PackedMatrix(const float* w, int out_dim, int in_dim, DType dtype, Bf16Products bf16)
    : out_dim_(out_dim), in_dim_(in_dim), dtype_(dtype), bf16_(bf16) {
  with_element(dtype, bf16, [&](auto t) { width_ = kWidth<decltype(t)>; });
  panels_ = (out_dim + width_ - 1) / width_;
  bytes_ = bytes_for(out_dim, in_dim, dtype, bf16);
  if (bytes_ == 0) return;
  panel_bytes_ = bytes_ / static_cast<std::size_t>(panels_);
  constexpr std::size_t kAlign = 64;  // aligned_alloc wants a multiple of it: whole lines
  data_.reset(static_cast<unsigned char*>(
      std::aligned_alloc(kAlign, (bytes_ + kAlign - 1) / kAlign * kAlign)));
  if (!data_)
    throw ResourceError(fmt::format("cannot allocate {:.6g} MB for a packed {} x {} weight matrix",
                                    static_cast<double>(bytes_) / 1e6, out_dim, in_dim));
  with_element(dtype, bf16,
               [&](auto t) { pack<decltype(t)>(data_.get(), w, out_dim, in_dim, panels_); });
}

void matmul(float* out, const float* x, const PackedMatrix& w, int n) {
  if (n <= 0 || w.out_dim() == 0) return;
  if (w.in_dim() == 0) {
    std::fill_n(out, static_cast<long>(n) * w.out_dim(), 0.0f);
    return;
  }
  with_element(w.dtype(), w.bf16_products(), [&](auto t) { product<decltype(t)>(out, x, w, n); });
}

std::string matmul_path(DType dtype, Bf16Products bf16) {
  std::string widen = "loaded as is";
  if (dtype == DType::BF16)
    widen =
        bf16 == Bf16Products::kPairs
            ? "bf16 pairs multiplied by AVX512-BF16 (vdpbf16ps), the activations rounded to bf16"
            : "bf16 widened in registers by a shift and a mask";
#if defined(__F16C__) && (defined(__AVX512F__) || defined(__AVX__))
  if (dtype == DType::F16) widen = "fp16 widened in registers by F16C";
#else
  if (dtype == DType::F16) widen = "fp16 widened element by element (no F16C)";
#endif
  std::string shape;
  with_element(dtype, bf16, [&](auto t) {
    using T = decltype(t);
    shape = fmt::format("{} rows x {} columns", Tile<T>::kMR, kWidth<T>);
  });
  return fmt::format("{}-bit vectors, blocks of {}, {}", kP * 32, shape, widen);
}

void add_bias(float* out, const float* bias, int n, int dim) {
  if (bias == nullptr) return;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < dim; ++i) out[static_cast<long>(r) * dim + i] += bias[i];
}

}  // namespace kvheap::cpu
