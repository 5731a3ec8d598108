// Owned device and pinned host buffers: typed RAII wrappers over cudaMalloc and cudaMallocHost,
// with upload/download from std::span. Same source against the real runtime and the simulator.
#pragma once

#include <cuda_runtime_api.h>

#include <bit>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "device/device.hpp"

namespace kvheap {

/// \brief `count` elements of T in device memory, freed on destruction. Move-only.
template <class T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "device buffers hold trivially copyable types");

 public:
  DeviceBuffer() = default;
  /// \brief Allocates `count` elements (uninitialised); throws ResourceError when out of memory.
  explicit DeviceBuffer(std::size_t count) : size_(count) {
    if (count > 0) KVHEAP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()));
  }
  /// \brief A buffer holding a copy of `host`.
  static DeviceBuffer from_host(std::span<const T> host, cudaStream_t stream = nullptr) {
    DeviceBuffer b(host.size());
    b.upload(host, 0, stream);
    return b;
  }
  ~DeviceBuffer() { reset(); }
  /// \brief Takes over `o`'s memory; `o` becomes empty.
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  /// \brief Frees this buffer's memory, then takes over `o`'s; `o` becomes empty.
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// \brief Device pointer to the first element (null when empty); for kernels only.
  [[nodiscard]] T* data() noexcept { return data_; }
  /// \brief Device pointer to the first element (null when empty); for kernels only.
  [[nodiscard]] const T* data() const noexcept { return data_; }
  /// \brief Number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// \brief Size in bytes.
  [[nodiscard]] std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  /// \brief True when the buffer holds no elements (and no memory).
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  /// \brief Copies `host` into elements [offset, offset + host.size()).
  void upload(std::span<const T> host, std::size_t offset = 0, cudaStream_t stream = nullptr) {
    check_range("upload", offset, host.size());
    if (host.empty()) return;
    KVHEAP_CUDA_CHECK(cudaMemcpyAsync(data_ + offset, host.data(), host.size_bytes(),
                                      cudaMemcpyHostToDevice, stream));
  }
  /// \brief Copies elements [offset, offset + host.size()) into `host`; returns once they are
  /// there (it synchronises `stream`).
  void download(std::span<T> host, std::size_t offset = 0, cudaStream_t stream = nullptr) const {
    check_range("download", offset, host.size());
    if (host.empty()) return;
    KVHEAP_CUDA_CHECK(cudaMemcpyAsync(host.data(), data_ + offset, host.size_bytes(),
                                      cudaMemcpyDeviceToHost, stream));
    KVHEAP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  /// \brief The whole buffer, copied to the host.
  [[nodiscard]] std::vector<T> to_host(cudaStream_t stream = nullptr) const {
    std::vector<T> host(size_);
    download(host, 0, stream);
    return host;
  }
  /// \brief Sets every byte to `byte` (0 gives zeros for all kvheap element types).
  void fill_bytes(int byte, cudaStream_t stream = nullptr) {
    if (size_ > 0) KVHEAP_CUDA_CHECK(cudaMemsetAsync(data_, byte, bytes(), stream));
  }
  /// \brief Makes room for at least `count` elements, contents not kept. It grows to the next
  /// power of two and never shrinks, so a buffer sized by each call's need stops reallocating
  /// (and stops calling cudaFree, which waits for the device) after a few calls.
  void grow(std::size_t count) {
    if (count <= size_) return;
    reset();  // free first: the old contents are scratch, and memory may be tight
    *this = DeviceBuffer(std::bit_ceil(count));
  }
  /// \brief Frees the memory; the buffer becomes empty.
  void reset() noexcept {
    if (data_ != nullptr) (void)cudaFree(data_);  // a destructor must not throw
    data_ = nullptr;
    size_ = 0;
  }

 private:
  void check_range(const char* what, std::size_t offset, std::size_t count) const {
    if (offset > size_ || count > size_ - offset) {
      throw InputError("DeviceBuffer::" + std::string(what) + ": elements [" +
                       std::to_string(offset) + ", " + std::to_string(offset + count) +
                       ") do not fit a buffer of " + std::to_string(size_));
    }
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// \brief `count` elements of T in pinned (page-locked) host memory: host-readable, and the
/// source or target of truly asynchronous copies. Move-only.
template <class T>
class PinnedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "pinned buffers hold trivially copyable types");

 public:
  PinnedBuffer() = default;
  /// \brief Allocates `count` elements (uninitialised); throws ResourceError on failure.
  explicit PinnedBuffer(std::size_t count) : size_(count) {
    if (count > 0) KVHEAP_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), bytes()));
  }
  ~PinnedBuffer() { reset(); }
  /// \brief Takes over `o`'s memory; `o` becomes empty.
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  /// \brief Frees this buffer's memory, then takes over `o`'s; `o` becomes empty.
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  /// \brief Host pointer to the first element (null when empty).
  [[nodiscard]] T* data() noexcept { return data_; }
  /// \brief Host pointer to the first element (null when empty).
  [[nodiscard]] const T* data() const noexcept { return data_; }
  /// \brief Number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// \brief Size in bytes.
  [[nodiscard]] std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  /// \brief The elements as a span (host-accessible).
  [[nodiscard]] std::span<T> span() noexcept { return {data_, size_}; }
  /// \brief The elements as a read-only span (host-accessible).
  [[nodiscard]] std::span<const T> span() const noexcept { return {data_, size_}; }
  /// \brief Element `i` (unchecked).
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  /// \brief Element `i` (unchecked).
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  /// \brief Makes room for at least `count` elements, contents not kept; grows to the next power
  /// of two and never shrinks, as DeviceBuffer::grow.
  void grow(std::size_t count) {
    if (count <= size_) return;
    reset();
    *this = PinnedBuffer(std::bit_ceil(count));
  }
  /// \brief Frees the memory; the buffer becomes empty.
  void reset() noexcept {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
    data_ = nullptr;
    size_ = 0;
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace kvheap
