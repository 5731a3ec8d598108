#include "common/util/host_buffer.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cstring>

#include "base/error.hpp"

namespace kvheap {

HostBuffer::HostBuffer(std::size_t bytes, PageSize pages) : size_(bytes) {
  if (bytes == 0) return;
  // aligned_alloc wants a size that is a multiple of the alignment. The heap allocator (and so
  // AddressSanitizer, which guards its blocks) still owns the memory; madvise only changes how
  // the kernel backs it.
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  if (bytes < kHugePage) pages = PageSize::kSmall;  // less than one huge page: nothing to gain
  const std::size_t align = pages == PageSize::kHuge ? kHugePage : 64;
  const std::size_t rounded = (bytes + align - 1) / align * align;
  data_.reset(static_cast<unsigned char*>(std::aligned_alloc(align, rounded)));
  if (!data_)
    throw ResourceError(fmt::format(
        "cannot allocate {:.6g} MB of host memory, one of the KV cache's two buffers (K and V: "
        "{:.6g} MB in all)",
        static_cast<double>(bytes) / 1e6, 2.0 * static_cast<double>(bytes) / 1e6));
#ifdef MADV_HUGEPAGE
  if (pages == PageSize::kHuge) (void)madvise(data_.get(), rounded, MADV_HUGEPAGE);  // a hint
#endif
  std::memset(data_.get(), 0, bytes);
}

}  // namespace kvheap
