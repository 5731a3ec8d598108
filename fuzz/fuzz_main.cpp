// The libFuzzer entry of one fuzz program. CMake compiles this file once per target with
// KVHEAP_FUZZ_ENTRY naming that target's function from entry_points.hpp, so every program is the
// same three lines around a different entry point.
#include <cstddef>
#include <cstdint>

#include "fuzz/entry_points.hpp"

#ifndef KVHEAP_FUZZ_ENTRY
#error "KVHEAP_FUZZ_ENTRY must name an entry point, e.g. fuzz_llama2c_loader_one"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return kvheap::KVHEAP_FUZZ_ENTRY(data, size);
}
