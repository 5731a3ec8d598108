// Large host allocations for KV storage: zero-filled, 2 MiB aligned and advised for transparent
// huge pages.
//
// Why huge pages: attention reads every cached position's row, a few KiB each, so with 4 KiB
// pages nearly every position needs a new TLB entry, and on a virtual machine each miss is a
// two-level page walk. Backing the cache with 2 MiB pages makes those misses rare
// (`bench_paged_attention_cpu --huge-pages=0` shows the difference on a given machine). It is only
// a hint: where the kernel offers no huge pages the buffer is ordinary memory.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <utility>

namespace kvheap {

/// \brief Which pages back a HostBuffer.
enum class PageSize {
  kHuge,   ///< 2 MiB aligned and advised for transparent huge pages (the default)
  kSmall,  ///< ordinary 4 KiB pages (for comparison)
};

/// \brief An owned, zero-filled byte buffer for KV storage.
class HostBuffer {
 public:
  HostBuffer() = default;
  /// \brief Allocates `bytes` zero bytes; throws ResourceError, naming the size, when it cannot.
  explicit HostBuffer(std::size_t bytes, PageSize pages = PageSize::kHuge);
  /// \brief Takes `other`'s memory; `other` is left empty (no data, size 0).
  HostBuffer(HostBuffer&& other) noexcept
      : data_(std::move(other.data_)), size_(std::exchange(other.size_, 0)) {}
  /// \copydoc HostBuffer(HostBuffer&&)
  HostBuffer& operator=(HostBuffer&& other) noexcept {
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
    return *this;
  }

  /// \brief First byte (nullptr when empty).
  [[nodiscard]] unsigned char* data() { return data_.get(); }
  /// \copydoc data()
  [[nodiscard]] const unsigned char* data() const { return data_.get(); }
  /// \brief The bytes as elements of T (the buffer's first byte is at least 64-byte aligned).
  template <class T>
  [[nodiscard]] T* as() {
    return reinterpret_cast<T*>(data_.get());
  }
  /// \copydoc as()
  template <class T>
  [[nodiscard]] const T* as() const {
    return reinterpret_cast<const T*>(data_.get());
  }
  /// \brief Bytes requested.
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> data_;
  std::size_t size_ = 0;
};

}  // namespace kvheap
