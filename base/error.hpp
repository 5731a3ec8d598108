// Error types shared by every kvheap program and library.
//
// kvheap never crashes on bad input: every check throws one of these with a message a person can
// act on ("checkpoint truncated: expected 1056540 bytes, found 4096"). Programs map them to exit
// codes: UsageError -> 2 (bad flags, bad values), everything else -> 1 (bad files, exhausted
// resources).
#pragma once

#include <stdexcept>
#include <string>

namespace kvheap {

/// \brief Base of every error kvheap throws on purpose; the message names the problem and what was
/// expected.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// \brief A command-line usage problem: unknown flag, malformed number, impossible combination.
/// Programs exit with status 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

/// \brief A file or value the program was given is malformed: truncated checkpoint, bad magic,
/// shape mismatch, token id out of range. Programs exit with status 1.
class InputError : public Error {
 public:
  using Error::Error;
};

/// \brief A resource ran out or does not exist: KV budget too small, block pool exhausted, no CUDA
/// device. Programs exit with status 1.
class ResourceError : public Error {
 public:
  using Error::Error;
};

}  // namespace kvheap
