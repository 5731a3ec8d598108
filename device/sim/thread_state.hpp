// The per-OS-thread state that simulated kernels read (threadIdx, blockIdx, blockDim, gridDim,
// the dynamic shared memory of the block) and the entry points their intrinsics call.
//
// Kernel code sees this only through device/sim/intrinsics.hpp; the simulator sets it. The
// variables are thread_local because one OS thread runs one block at a time: every fiber of the
// block sees the same blockIdx, and the scheduler rewrites threadIdx before resuming a fiber.
#pragma once

#include <vector_types.h>

#include <cstddef>
#include <cstdint>

namespace kvheap::sim::detail {

/// \brief Where an intrinsic was called, captured by a defaulted argument at the call site.
///
/// std::source_location would do, but clang 14 with libstdc++ 12 lacks it; the builtins behind
/// it work in both compilers, and as default arguments they report the outermost caller.
struct SourceSite {
  const char* file;  ///< source file of the call, as the compiler spells it
  unsigned line;     ///< line of the call
  unsigned column;   ///< 0 where the compiler has no __builtin_COLUMN (GCC 12)
#if defined(__has_builtin) && __has_builtin(__builtin_COLUMN)
  /// \brief Captures the caller's file, line and column (pass nothing).
  constexpr SourceSite(const char* f = __builtin_FILE(), unsigned l = __builtin_LINE(),
                       unsigned c = __builtin_COLUMN())
      : file(f), line(l), column(c) {}
#else
  /// \brief Captures the caller's file and line (pass nothing).
  constexpr SourceSite(const char* f = __builtin_FILE(), unsigned l = __builtin_LINE())
      : file(f), line(l), column(0) {}
#endif
};

inline thread_local uint3 t_thread_idx{0, 0, 0};  ///< threadIdx of the fiber running now
inline thread_local uint3 t_block_idx{0, 0, 0};   ///< blockIdx of the block this thread runs
inline thread_local dim3 t_block_dim{1, 1, 1};    ///< blockDim of the launch
inline thread_local dim3 t_grid_dim{1, 1, 1};     ///< gridDim of the launch
inline thread_local std::byte* t_dynamic_smem = nullptr;   ///< this block's dynamic shared memory
inline thread_local std::size_t t_dynamic_smem_bytes = 0;  ///< its size, as launched

/// \brief The flavours of the block-wide barrier.
enum class BlockSync : std::uint8_t { Plain, Count, And, Or };

/// \brief The warp collectives; all go through one exchange in the scheduler.
enum class WarpOp : std::uint8_t {
  Sync,
  ShflIdx,
  ShflUp,
  ShflDown,
  ShflXor,
  Ballot,
  Any,
  All,
  Mma,
  Ldmatrix
};

/// \brief __syncthreads and its _count/_and/_or forms: waits for the whole block at `site`;
/// returns the count of threads with a non-zero predicate (Count) or the and/or of them.
int block_sync(BlockSync kind, int predicate, const SourceSite& site);

/// \brief One warp collective: contributes `value` for this lane, waits for the lanes of `mask`,
/// and returns this lane's result (the partner's bits for shuffles, the vote for votes).
/// `arg` is the source lane, delta or xor mask of a shuffle; `width` its segment width.
std::uint64_t warp_collective(WarpOp op, unsigned mask, std::uint64_t value, int arg, int width,
                              const SourceSite& site);

/// \brief Lanes of the calling warp that exist and have not exited.
unsigned active_mask();

/// \brief The element type of a tensor-core product's inputs (the accumulators are fp32).
enum class MmaType : std::uint8_t { F16, BF16 };

/// \brief One lane's registers of an mma.sync.m16n8k16 with fp32 accumulators, in the fragment
/// layout of the PTX ISA: `a` holds 8 elements of the 16 x 16 A (two to a register, the lower
/// index in the low half), `b` 4 of the 16 x 8 B, and `d` 4 of the 16 x 8 accumulator, which the
/// product adds to in place (D = A B + D).
struct MmaLane {
  MmaType type;       ///< the inputs' element type (the same for every lane)
  const unsigned* a;  ///< [4]
  const unsigned* b;  ///< [2]
  float* d;           ///< [4], read and written
};

/// \brief mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: a warp collective of all 32 lanes.
/// The last lane to arrive computes the whole 16 x 8 x 16 product in fp32 from every lane's
/// fragments and writes each lane's accumulators; a lane that exited or does not exist fails
/// the launch, naming the lanes.
void mma_m16n8k16(const MmaLane& lane, const SourceSite& site);

/// \brief One lane's part of an ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: lane 8j + r
/// names row r of matrix j (8 16-bit elements, 16-byte aligned), and receives 4 registers,
/// register j two elements of matrix j: of row lane / 4, columns 2 (lane % 4) and 2 (lane % 4) + 1
/// (the lower in the low half), or with `trans` of column lane / 4, rows 2 (lane % 4) and
/// 2 (lane % 4) + 1.
struct LdmatrixLane {
  const void* row;  ///< the row this lane names, in shared memory
  unsigned* out;    ///< [4], written
  bool trans;       ///< the .trans form (the same for every lane)
};

/// \brief ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: a warp collective of all 32 lanes, like
/// mma_m16n8k16; the last lane to arrive reads the four matrices and writes every lane's registers.
void ldmatrix_x4(const LdmatrixLane& lane, const SourceSite& site);

/// \brief The data movement behind ldmatrix_x4 for the warp's lanes[0..31] (for its tests).
void ldmatrix_x4_gather(LdmatrixLane* const (&lanes)[32]);

/// \brief D += A B for the warp's fragments `lanes[0..31]` (the arithmetic behind mma_m16n8k16,
/// exposed for its tests): every product of two 16-bit inputs is exact in fp32, and each
/// output adds its 16 products to the accumulator in order of k, rounding after each add.
void mma_m16n8k16_product(MmaLane* const (&lanes)[32]);

/// \brief __pipeline_memcpy_async (cp.async): queues a copy of `bytes` (4, 8 or 16, both
/// pointers aligned to it) from global to shared memory, the last `zfill` of them zeros, into the
/// calling thread's open batch. Nothing is copied yet: the batch lands when a wait covers it, so
/// a kernel that reads the shared memory too early sees what was there before, as on a GPU.
void async_copy(void* dst, const void* src, std::size_t bytes, std::size_t zfill,
                const SourceSite& site);
/// \brief __pipeline_commit: closes the calling thread's open batch.
void async_commit(const SourceSite& site);
/// \brief __pipeline_wait_prior: lands every committed batch of the calling thread but the
/// newest `prior` ones, oldest first.
void async_wait_prior(std::size_t prior, const SourceSite& site);

/// \brief __trap(): fails the launch with the call site.
[[noreturn]] void trap(const SourceSite& site);

/// \brief Index of the OS worker thread running the calling block (0 = the launching thread);
/// lets tests observe that blocks really ran on several threads.
int current_worker();

}  // namespace kvheap::sim::detail
