// POSIX implementation of MappedFile: open, fstat, mmap, close the descriptor right away (the
// mapping keeps the file referenced on its own).
#include "common/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.hpp"

namespace kvheap {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw InputError(what + " '" + path + "': " + std::strerror(err));
}

// Closes the descriptor on every path out of the constructor, including throws.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  const FdGuard guard{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  if (guard.fd < 0) fail("cannot open checkpoint", path_, errno);

  struct stat st {};
  if (::fstat(guard.fd, &st) != 0) fail("cannot stat checkpoint", path_, errno);
  // A directory opens fine with O_RDONLY but cannot be mapped; say what is wrong instead of EISDIR
  // or ENODEV from mmap.
  if (!S_ISREG(st.st_mode)) throw InputError("checkpoint '" + path_ + "' is not a regular file");

  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ == 0) return;  // mmap of length 0 is EINVAL; an empty file simply has no bytes

  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, guard.fd, 0);
  if (p == MAP_FAILED) fail("cannot memory-map checkpoint", path_, errno);
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
