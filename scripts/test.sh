#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, then
#
#   1. the simulator build (preset sim): every test, the CUDA kernels running on kvheap's CPU
#      simulator, and the docs (Doxygen warnings are errors)
#   2. the sanitizer build (preset asan): every test again under AddressSanitizer and UBSan
#   3. the real CUDA build (preset cuda): compiles and links with nvcc, when nvcc is installed
#   4. the CPU-only build (preset cpu): the programs without any CUDA code, and their CLI tests
#   5. the fuzz targets, each for a bounded time (scripts/fuzz.sh)
#   6. format and lint checks (scripts/lint.sh)
#
# KVHEAP_MODELS_DIR points the tests at a folder holding stories260K.bin and tokenizer.bin; tests
# that need them skip without it (and fail instead when CI=true). KVHEAP_FUZZ_SECONDS sets the
# time per fuzz target (default 60).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
jobs=$(nproc)
step() { printf '\n== %s ==\n' "$*"; }
SECONDS=0

step "1. simulator build: all tests, CUDA kernels on the CPU simulator"
cmake --preset sim
cmake --build --preset sim -j "$jobs"
ctest --preset sim -j "$jobs"
cmake --build --preset sim --target docs
echo "[$SECONDS s]"

step "2. sanitizer build (AddressSanitizer + UBSan, leak detection on)"
cmake --preset asan
cmake --build --preset asan -j "$jobs"
ctest --preset asan -j "$jobs"
echo "[$SECONDS s]"

step "3. real CUDA build: compile and link with nvcc"
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  cmake --preset cuda -DKVHEAP_BUILD_TESTS=ON -DKVHEAP_BUILD_DOCS=OFF
  cmake --build --preset cuda -j "$jobs"
else
  echo "nvcc not found: skipped (install the CUDA toolkit to check the real build)"
fi
echo "[$SECONDS s]"

step "4. CPU-only build (no CUDA code at all)"
cmake --preset cpu -DKVHEAP_BUILD_DOCS=OFF -DKVHEAP_BUILD_BENCH=OFF
cmake --build --preset cpu -j "$jobs" --target test_cli
ctest --preset cpu -j "$jobs" -R "Cli\."
echo "[$SECONDS s]"

step "5. fuzz targets, ${KVHEAP_FUZZ_SECONDS:-60} s each"
bash scripts/fuzz.sh "${KVHEAP_FUZZ_SECONDS:-60}"
echo "[$SECONDS s]"

step "6. format and lint"
bash scripts/lint.sh
echo "[$SECONDS s]"

step "all passed in $SECONDS s"
