// A cache whose K and V live in a KVStorage (common/cache/kv_storage.hpp), host or device memory.
//
// It owns the storage and does everything that is the same for every such policy: it loads each
// batch's view before the layers run, and hands the storage every layer's writes and attention.
// A chapter's cache derives from it and supplies only what is its own: the address mapping of a
// batch (view_for, which also makes any copy-on-write copies through copy_slots), and its byte
// accounting (bytes_reserved, bytes_used).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/cache/kv_cache.hpp"
#include "common/cache/kv_storage.hpp"

namespace kvheap {

/// \brief A KVCache over a KVStorage: the chapter's view_for() decides where each row's K and V
/// go, the storage holds them and runs the attention.
class StorageCache : public KVCache {
 public:
  /// \brief view_for(batch), loaded into the storage before any layer writes.
  void prepare(const Batch& batch) final;
  /// \brief Stores the rows' K and V where the loaded view says.
  void write(int layer, const Batch& batch, const float* k, const float* v) final;
  /// \brief Every row's attention over the positions the loaded view maps.
  void attend(int layer, const Batch& batch, const float* q, float* out) final;
  /// \brief The storage's count for the loaded view (shared prefixes read once, when planned).
  [[nodiscard]] long positions_read() const final { return storage_->positions_read(); }
  /// \brief The storage's count of what the shared levels read, by level.
  [[nodiscard]] std::vector<long> shared_positions_read() const final {
    return storage_->shared_positions_read();
  }
  /// \brief Bytes the whole storage occupies, every slot included (the pool, or every
  /// reservation).
  [[nodiscard]] std::size_t storage_bytes() const { return storage_->bytes(); }

 protected:
  /// \brief Takes the storage the cache's slots index.
  explicit StorageCache(std::unique_ptr<KVStorage> storage) : storage_(std::move(storage)) {}

  /// \brief The chapter's address mapping: checks the batch's rows against the sequences held,
  /// grows them to the positions the rows write, and returns where each row writes and which
  /// slots it reads. Throws, changing nothing, for a batch the cache cannot take.
  virtual KVView view_for(const Batch& batch) = 0;
  /// \brief Copies slots [src, src + count) to [dst, dst + count) in every layer, ordered before
  /// the batch's writes (copy-on-write, from view_for).
  void copy_slots(std::int64_t src, std::int64_t dst, int count) {
    storage_->copy_slots(src, dst, count);
  }

 private:
  std::unique_ptr<KVStorage> storage_;
};

}  // namespace kvheap
