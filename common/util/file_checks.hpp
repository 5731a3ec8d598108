// RegularFile: opening an input file only when it is a plain file on disk, and reading it whole
// within a size limit.
//
// A path the user gives may name a directory, a FIFO or a device. std::ifstream opens all three:
// a directory then fails inside the stream buffer with an unhelpful "Is a directory", a FIFO
// blocks until someone writes to it, and /dev/zero never ends. Every reader of a user-supplied
// path goes through here first, so each of these is one InputError naming the path, what it is,
// and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvheap {

/// \brief A read-only descriptor of a regular file (RAII; move-only), with its size at open time.
///
/// Opening never blocks: the descriptor is opened non-blocking, so a FIFO with no writer is
/// reported rather than waited on.
class RegularFile {
 public:
  /// \brief Opens `path` for reading. `what` names the file's role in messages ("tokenizer",
  /// "checkpoint"); `expected` says what should be there ("a llama2.c tokenizer.bin") and may be
  /// empty.
  ///
  /// Throws InputError when the path cannot be opened (the system's reason is named) or is a
  /// directory, FIFO, socket or device rather than a regular file.
  RegularFile(std::string path, std::string_view what, std::string_view expected);
  ~RegularFile();

  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  RegularFile(RegularFile&&) = delete;
  RegularFile& operator=(RegularFile&&) = delete;

  /// \brief The open descriptor, valid while this object lives.
  [[nodiscard]] int fd() const { return fd_; }
  /// \brief Size in bytes when the file was opened.
  [[nodiscard]] std::uint64_t size() const { return size_; }

  /// \brief The whole content. Throws InputError naming the limit when the file is larger than
  /// `max_bytes`, and naming the system's reason when reading fails or the file shrank.
  [[nodiscard]] std::string read_all(std::uint64_t max_bytes) const;

 private:
  std::string path_;
  std::string what_;
  std::string expected_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// \brief Throws InputError unless `path` can be opened as a regular file; see RegularFile for
/// `what` and `expected`. For readers that then open the file with their own stream.
void require_regular_file(const std::string& path, std::string_view what,
                          std::string_view expected);

/// \brief The whole content of the regular file `path`, at most `max_bytes` long; throws
/// InputError as RegularFile and RegularFile::read_all do.
[[nodiscard]] std::string read_regular_file(const std::string& path, std::string_view what,
                                            std::string_view expected, std::uint64_t max_bytes);

}  // namespace kvheap
