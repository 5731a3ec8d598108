// MappedFile: a whole file mapped read-only into memory, unmapped when the object goes away.
//
// llama2.c fp32 checkpoints are used in place: the loader points the model's tensors straight into
// the mapping, so a 1 GB checkpoint costs no copy and the page cache shares it between processes.
// ModelWeights keeps the mapping alive through a shared_ptr in its storage list.
#pragma once

#include <cstddef>
#include <string>

namespace kvheap {

/// \brief Read-only memory map of one whole file (RAII; move-only).
///
/// An empty file is valid: size() is 0 and data() is null, since mmap rejects zero-length maps.
class MappedFile {
 public:
  /// \brief Maps `path`; throws InputError naming the path and the system's reason when it cannot
  /// be opened, is not a regular file (a directory, FIFO or device: see RegularFile), or cannot be
  /// mapped.
  explicit MappedFile(std::string path);
  ~MappedFile();

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  /// \brief Takes over the mapping; `other` is left empty.
  MappedFile(MappedFile&& other) noexcept;
  /// \brief Releases this mapping and takes over `other`'s.
  MappedFile& operator=(MappedFile&& other) noexcept;

  /// \brief First byte of the file ([size()] bytes), or null for an empty file.
  [[nodiscard]] const std::byte* data() const { return data_; }
  /// \brief File size in bytes at the time it was mapped.
  [[nodiscard]] std::size_t size() const { return size_; }
  /// \brief The path the file was opened with, for error messages.
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  void release() noexcept;

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace kvheap
