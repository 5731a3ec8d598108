// POSIX implementation of RegularFile: open non-blocking, fstat the descriptor (not the path, so
// the file checked is the file read), and read with plain read(2).
#include "common/util/file_checks.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.hpp"

namespace kvheap {

namespace {

// "; expected X", or nothing when the caller has no expectation to state.
std::string expectation(std::string_view expected) {
  return expected.empty() ? std::string() : fmt::format("; expected {}", expected);
}

std::string_view kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

}  // namespace

RegularFile::RegularFile(std::string path, std::string_view what, std::string_view expected)
    : path_(std::move(path)), what_(what), expected_(expected) {
  const auto not_regular = [this](mode_t mode) {
    return InputError(fmt::format("{} '{}' is {}, not a regular file{}", what_, path_,
                                  kind_of(mode), expectation(expected_)));
  };
  // What the path names is checked before it is opened: opening a device can act on it (a
  // watchdog arms, a tape rewinds) and opening a FIFO releases a writer waiting for a reader.
  struct stat before {};
  if (::stat(path_.c_str(), &before) == 0 && !S_ISREG(before.st_mode))
    throw not_regular(before.st_mode);
  // O_NONBLOCK: should the path have become a FIFO since, opening it would otherwise wait for a
  // writer, forever if none comes. It changes nothing for regular files. The descriptor's own
  // fstat below is what counts.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) {
    throw InputError(fmt::format("cannot open {} '{}': {}{}", what_, path_, std::strerror(errno),
                                 expectation(expected_)));
  }
  struct stat st {};
  const int stat_errno = ::fstat(fd_, &st) == 0 ? 0 : errno;
  if (stat_errno != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    if (stat_errno != 0) {
      throw InputError(
          fmt::format("cannot stat {} '{}': {}", what_, path_, std::strerror(stat_errno)));
    }
    throw not_regular(st.st_mode);
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string RegularFile::read_all(std::uint64_t max_bytes) const {
  // Checked before allocating: a size from fstat is trusted for the limit, never for the buffer
  // beyond it.
  if (size_ > max_bytes) {
    throw InputError(fmt::format("{} '{}' is {} bytes, over the {}-byte limit{}", what_, path_,
                                 size_, max_bytes, expectation(expected_)));
  }
  std::string data(static_cast<std::size_t>(size_), '\0');
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n =
        ::pread(fd_, data.data() + done, data.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw InputError(fmt::format("cannot read {} '{}': {}", what_, path_, std::strerror(errno)));
    }
    if (n == 0) break;  // the file was truncated after it was opened
    done += static_cast<std::size_t>(n);
  }
  if (done != data.size()) {
    throw InputError(fmt::format("{} '{}' shrank while it was read: expected {} bytes, found {}",
                                 what_, path_, data.size(), done));
  }
  return data;
}

void require_regular_file(const std::string& path, std::string_view what,
                          std::string_view expected) {
  (void)RegularFile(path, what, expected);
}

std::string read_regular_file(const std::string& path, std::string_view what,
                              std::string_view expected, std::uint64_t max_bytes) {
  return RegularFile(path, what, expected).read_all(max_bytes);
}

}  // namespace kvheap
