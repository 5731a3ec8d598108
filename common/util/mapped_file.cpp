// POSIX implementation of MappedFile: open the regular file, mmap it, close the descriptor right
// away (the mapping keeps the file referenced on its own).
#include "common/util/mapped_file.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.hpp"
#include "common/util/file_checks.hpp"

namespace kvheap {

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  // RegularFile turns a directory, FIFO or device into an InputError before mmap would fail on it
  // with EISDIR or ENODEV, and never blocks on a FIFO. The descriptor closes when it goes out of
  // scope; the mapping keeps the file referenced on its own.
  const RegularFile file(path_, "checkpoint", "");
  size_ = static_cast<std::size_t>(file.size());
  if (size_ == 0) return;  // mmap of length 0 is EINVAL; an empty file simply has no bytes

  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (p == MAP_FAILED) {
    throw InputError(
        fmt::format("cannot memory-map checkpoint '{}': {}", path_, std::strerror(errno)));
  }
  data_ = static_cast<const std::byte*>(p);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace kvheap
