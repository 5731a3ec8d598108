// Where the K and V bytes of a cache live, behind one interface: host memory, read by the CPU
// twins of the attention kernels, or device memory, read by the CUDA kernels.
//
// A cache policy (chapters 2-4) decides which slot every position of every sequence occupies;
// the storage holds the bytes and runs the kernels. Once per batch the policy hands it a KVView,
// plain host arrays saying where each row writes and which slots it reads:
//
//   contiguous (a reservation):  position t of row i at slot first_slot[i] + t
//   paged (page tables, CSR):    position t of row i at slot
//                                indices[indptr[s] + t / block_size] * block_size + t % block_size,
//                                s = row_seq[i]
//
// A device storage uploads the view once per batch (the page-table upload), so every layer's
// write and attend reuse it. The policy is the same host code whichever memory holds the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/cache/batch.hpp"
#include "common/model/model_config.hpp"
#include "kernels/shared_prefix_attention.hpp"

namespace kvheap {

/// \brief Where one batch's rows find their K and V slots (host arrays, built by a cache policy).
struct KVView {
  bool paged = false;                      ///< page tables (true) or contiguous ranges (false)
  std::vector<std::int64_t> slot_mapping;  ///< [n] slot each row's K and V are written to
  std::vector<int> n_ctx;                  ///< [n] positions each row attends to: pos + 1
  int max_ctx = 0;                         ///< the largest n_ctx
  std::vector<std::int64_t> first_slot;    ///< [n] contiguous: slot of position 0 of row i
  int block_size = 0;                      ///< paged: slots per block
  std::vector<int> indptr = {0};           ///< paged: [num_seqs + 1] CSR offsets into indices
  std::vector<int> indices;                ///< paged: [pages] physical block ids, logical order
  std::vector<int> last_page_len;          ///< paged: [num_seqs] slots used in the last block
  std::vector<int> row_seq;                ///< paged: [n] each row's sequence (index into indptr)
  SharedPrefixPlan prefixes;               ///< paged: rows that read a shared prefix once

  /// \brief Rows of the batch.
  [[nodiscard]] int rows() const { return static_cast<int>(slot_mapping.size()); }
};

/// \brief Sets `view`'s n_ctx, max_ctx and paged CSR arrays for `batch`, whose sequences hold
/// every position their rows write: `pages_of(seq)` is a sequence's page table and
/// `length_of(seq)` its length. Sequences are numbered in order of first appearance; the page
/// tables are read as they stand, after the batch's appends.
void add_page_tables(KVView& view, const Batch& batch, int block_size,
                     const std::function<const std::vector<int>&(int)>& pages_of,
                     const std::function<int(int)>& length_of);

/// \brief K and V for `num_slots` token slots in every layer: [n_layers, num_slots, n_kv_heads,
/// head_dim] each, in the KV dtype, zeroed at creation, in host or device memory.
///
/// Pointers passed to write() and attend() are in the same memory as the storage: host arrays
/// for a host storage, device arrays for a device one.
class KVStorage {
 public:
  virtual ~KVStorage() = default;

  /// \brief Takes the view of the next batch (a device storage uploads it here, once).
  virtual void load(KVView view) = 0;
  /// \brief Stores row i's K and V at slot view.slot_mapping[i] of `layer`.
  /// \param layer which transformer block, 0-based
  /// \param k [rows, kv_dim] fp32, RoPE applied
  /// \param v [rows, kv_dim] fp32
  virtual void write(int layer, const float* k, const float* v) = 0;
  /// \brief Causal attention of every row over its positions in `layer`: each shared prefix of
  /// the view read once for all the rows that share it, every other position once per row.
  /// \param layer which transformer block, 0-based
  /// \param q   [rows, n_heads * head_dim] fp32, RoPE applied
  /// \param out [rows, n_heads * head_dim] fp32, written
  virtual void attend(int layer, const float* q, float* out) = 0;
  /// \brief Copies slots [src, src + count) to [dst, dst + count), K and V of every layer
  /// (copy-on-write), ordered before the next write. Throws std::logic_error outside the storage.
  virtual void copy_slots(std::int64_t src, std::int64_t dst, int count) = 0;
  /// \brief Positions the loaded view's attention reads per layer: every row's context, minus
  /// what shared prefixes save (a GPU reads a prefix once per slice of
  /// gpu_heads_per_block(head_dim) query heads per KV head).
  [[nodiscard]] virtual long positions_read() const = 0;
  /// \brief The part of positions_read() that the shared levels read, by level (top first).
  [[nodiscard]] virtual std::vector<long> shared_positions_read() const = 0;

  /// \brief Token slots per layer.
  [[nodiscard]] std::int64_t num_slots() const { return num_slots_; }
  /// \brief Bytes of K and V, every slot of every layer.
  [[nodiscard]] std::size_t bytes() const;

 protected:
  /// \brief Storage for `num_slots` slots of `config`'s K and V in `kv`; UsageError below one.
  KVStorage(const ModelConfig& config, DType kv, std::int64_t num_slots);
  /// \brief Throws std::logic_error unless [first, first + count) lies inside the storage.
  void check_slots(std::int64_t first, int count, const char* what) const;

  ModelConfig config_;      ///< the model whose K and V are stored
  DType kv_;                ///< element type
  std::int64_t num_slots_;  ///< slots per layer
};

/// \brief Which memory a storage lives in.
enum class Memory {
  kHost,    ///< host memory, read by the CPU twins
  kDevice,  ///< device memory (a GPU, or the CPU simulator of one), read by the CUDA kernels
};

/// \brief A storage of `num_slots` slots for `config`'s K and V in dtype `kv`. `what` names it in
/// the ResourceError raised when the memory cannot hold it ("KV pool of 64 blocks x 16 tokens").
/// Device memory in a build without CUDA code is a ResourceError too.
std::unique_ptr<KVStorage> make_storage(Memory memory, const ModelConfig& config, DType kv,
                                        std::int64_t num_slots, const std::string& what);

/// \brief make_storage() for device memory: the CUDA kernels' storage in a build with CUDA code
/// (common/cache/cuda/device_kv_storage.cpp), a ResourceError saying the build has none otherwise
/// (common/forward/no_cuda.cpp).
std::unique_ptr<KVStorage> make_device_storage(const ModelConfig& config, DType kv,
                                               std::int64_t num_slots, const std::string& what);

}  // namespace kvheap
