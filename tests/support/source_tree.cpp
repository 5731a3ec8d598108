#include "tests/support/source_tree.hpp"

#ifndef KVHEAP_SOURCE_DIR
#error "KVHEAP_SOURCE_DIR must point at the repository root"
#endif

namespace kvheap::test {

std::filesystem::path source_dir() { return KVHEAP_SOURCE_DIR; }

}  // namespace kvheap::test
