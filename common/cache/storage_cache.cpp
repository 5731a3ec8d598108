#include "common/cache/storage_cache.hpp"

#include <utility>

namespace kvheap {

void StorageCache::prepare(const Batch& batch) { storage_->load(view_for(batch)); }

void StorageCache::write(int layer, const Batch&, const float* k, const float* v) {
  storage_->write(layer, k, v);
}

void StorageCache::attend(int layer, const Batch&, const float* q, float* out) {
  storage_->attend(layer, q, out);
}

}  // namespace kvheap
