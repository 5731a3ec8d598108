// The device side of the backend in a build without CUDA code (KVHEAP_CUDA=off): asking for it
// is a ResourceError that says how to get it.
#include "base/error.hpp"
#include "common/forward/backend.hpp"
#include "common/cache/kv_storage.hpp"

namespace kvheap {
namespace {
[[noreturn]] void no_cuda() {
  throw ResourceError(
      "--device cuda: this build has no CUDA support (configured with KVHEAP_CUDA=off); rebuild "
      "with the cuda or sim preset, or use --device cpu");
}
}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const ModelWeights&, const BackendConfig&) { no_cuda(); }

std::unique_ptr<KVStorage> make_device_storage(const ModelConfig&, DType, std::int64_t,
                                               const std::string&) {
  no_cuda();
}

bool cuda_device_available() { return false; }

}  // namespace kvheap
