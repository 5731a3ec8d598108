// Many small host arrays sent to the device in one copy, from pinned memory.
//
// A forward pass needs its batch described on the device (token ids, positions, the rows that
// want logits, the sampling jobs) and its cache's view (slot mapping, page tables, the shared-
// prefix plan). Copied one by one from pageable memory, each array is a separate call that the
// driver stages through a buffer of its own before it returns. Gathered here, they cost one
// cudaMemcpyAsync, which returns at once.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>

#include "device/buffers.hpp"
#include "device/device.hpp"

namespace kvheap {

/// \brief Host arrays gathered in one pinned buffer and copied to the device in one call.
///
/// Per use: clear(), add() each array (keep the offsets it returns), upload(), then device() for
/// the kernels. Both buffers grow to the largest set seen and are kept, so a steady pass
/// allocates and frees nothing. clear() must come after the work that read the previous upload
/// has been waited for: the pinned buffer is then rewritten while no copy reads it.
class StagedUpload {
 public:
  /// \brief Forgets the arrays added so far (their memory is reused).
  void clear() noexcept { used_ = 0; }

  /// \brief Appends a copy of `values`, aligned for any kvheap element type; returns its offset.
  template <class T>
  std::size_t add(std::span<const T> values) {
    static_assert(std::is_trivially_copyable_v<T>, "staged arrays hold trivially copyable types");
    const std::size_t at = (used_ + kAlign - 1) / kAlign * kAlign;
    reserve_host(at + values.size_bytes());
    if (!values.empty()) std::memcpy(host_.data() + at, values.data(), values.size_bytes());
    used_ = at + values.size_bytes();
    return at;
  }

  /// \brief Copies everything added since clear() to the device, in one call on `stream`.
  void upload(cudaStream_t stream) {
    device_.grow(std::max(used_, kFirstBytes));
    if (used_ > 0)
      KVHEAP_CUDA_CHECK(
          cudaMemcpyAsync(device_.data(), host_.data(), used_, cudaMemcpyHostToDevice, stream));
  }

  /// \brief The device address of the array added at `offset`; valid from upload() until the
  /// next upload().
  template <class T>
  [[nodiscard]] const T* device(std::size_t offset) const noexcept {
    return reinterpret_cast<const T*>(device_.data() + offset);
  }

  /// \brief Bytes added since clear(): what upload() copies, alignment padding included.
  [[nodiscard]] std::size_t bytes() const noexcept { return used_; }

  /// \brief While alive, current() on this thread is `upload`: a cache prepared inside a forward
  /// pass adds its arrays to the pass's upload this way, without an interface of its own for it.
  class Scope {
   public:
    /// \brief Makes `upload` the current one on this thread (scopes nest).
    explicit Scope(StagedUpload& upload) noexcept : outer_(current_) { current_ = &upload; }
    ~Scope() { current_ = outer_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StagedUpload* outer_;
  };
  /// \brief The upload of the innermost live Scope on this thread, or null.
  [[nodiscard]] static StagedUpload* current() noexcept { return current_; }

 private:
  static constexpr std::size_t kAlign = 16;
  static constexpr std::size_t kFirstBytes = std::size_t{1} << 16;

  // Grows the pinned buffer, keeping what was added.
  void reserve_host(std::size_t bytes) {
    if (bytes <= host_.size()) return;
    PinnedBuffer<std::byte> bigger(std::bit_ceil(std::max(bytes, kFirstBytes)));
    if (used_ > 0) std::memcpy(bigger.data(), host_.data(), used_);
    host_ = std::move(bigger);
  }

  PinnedBuffer<std::byte> host_;
  DeviceBuffer<std::byte> device_;
  std::size_t used_ = 0;
  static inline thread_local StagedUpload* current_ = nullptr;
};

}  // namespace kvheap
