// The repository's root folder, for the tests, fuzz entry points and benchmarks that read its
// committed files (test data, the seed corpus, the sources themselves). Only source_tree.cpp is
// compiled with the path, so every other object file is the same wherever a clone lies, and a
// compiler cache filled by one clone serves another.
#pragma once

#include <filesystem>

namespace kvheap::test {

/// \brief The root of the source tree this build was configured from.
std::filesystem::path source_dir();

}  // namespace kvheap::test
