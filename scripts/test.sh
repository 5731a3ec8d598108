#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, then
#
#   1. the simulator build (preset sim): every test, the CUDA kernels running on kvheap's CPU
#      simulator, and the docs (Doxygen warnings are errors)
#   2. the sanitizer build (preset asan): every test again under AddressSanitizer and UBSan, at -O1
#      with line tables only (-g1), which compiles in half the time of -O2 -g and reports the same
#      file:line stacks
#   3. the real CUDA build (preset cuda, in build/cuda-check): compiles and links with nvcc; then
#      the kernels' registers, spills and occupancy for sm_80 and sm_90 against the committed
#      docs/results/kernel-resources.md (scripts/kernel_resources.py), and the machine code of
#      decode attention's tile loops (the KernelCode tests)
#   4. the CPU-only build (preset cpu, in build/cpu-check): the programs without any CUDA code,
#      and their CLI tests
#   5. the fuzz targets, each for a bounded time (scripts/fuzz.sh)
#   6. format and lint checks (scripts/lint.sh)
#
# Every build compiles through ccache (install-deps.sh installs it; cmake/compiler_cache.cmake), so
# a run in a fresh clone recompiles only the sources an earlier run did not compile as they are.
#
# Steps 1-3 need the CUDA toolkit (not a GPU). Where it is missing, steps 1-4 become the CPU-only
# build with every test it has, and the script says what was left out; under CI it fails.
#
# KVHEAP_MODELS_DIR points the tests at a folder holding stories260K.bin and tokenizer.bin; tests
# that need them skip without it (and fail instead when CI=true). KVHEAP_FUZZ_SECONDS sets the
# time per fuzz target (default 12: twelve targets, two at a time, six rounds, and CI is kept under
# 30 minutes; `scripts/fuzz.sh 600` fuzzes for longer).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
if command -v ccache >/dev/null; then ccache --zero-stats >/dev/null; fi  # this run's hits, below
jobs=$(nproc)
step() { printf '\n== %s ==\n' "$*"; }
# build_and_test PRESET [docs]: configure, build and run every test of a preset (and its docs).
build_and_test() {
  cmake --preset "$1"
  cmake --build --preset "$1" -j "$jobs"
  ctest --preset "$1" -j "$jobs"
  if [ "${2:-}" = docs ]; then cmake --build --preset "$1" --target docs; fi
  echo "[$SECONDS s]"
}
SECONDS=0

# The simulator builds compile the CUDA sources as C++, but against the CUDA toolkit's headers
# (cuda_fp16.h, cuda_bf16.h), so they need the toolkit even where there is no GPU. Debian ships
# it only in its non-free archive area, so install-deps.sh does not add it. Without it the CPU
# build runs every test it has instead, and says loudly what was left out; CI never accepts that.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  toolkit=yes
else
  toolkit=no
  msg="no CUDA toolkit (nvcc) found: the simulator, sanitizer and nvcc builds need its headers"
  case "${CI:-}" in  # the tests' own rule: CI is on unless unset, empty, 0 or false
    "" | 0 | false) ;;
    *)
      echo "test.sh: $msg, and CI must run them" >&2
      exit 1
      ;;
  esac
  echo "test.sh: WARNING: $msg; running the CPU-only build's tests instead. Install the CUDA"
  echo "toolkit (NVIDIA's packages, or Debian's nvidia-cuda-toolkit from non-free) to test the"
  echo "CUDA code on the simulator."
fi

if [ "$toolkit" = yes ]; then
  step "1. simulator build: all tests, CUDA kernels on the CPU simulator"
  build_and_test sim docs

  step "2. sanitizer build (AddressSanitizer + UBSan, leak detection on)"
  build_and_test asan

  # A compile-and-link check, in a folder of its own (build/cuda-check) so that build/cuda stays
  # the preset's optimised build. Nothing built here runs, so the host code is compiled at -O0
  # (the front end and the linker see all of it either way) and the device code for sm_90 alone:
  # no source has a branch for one architecture yet, and ptxas optimises device code whatever
  # -O says. scripts/gpu-check.sh builds for the GPU it runs on. The resource check compiles the
  # kernels' device code again, for sm_80 and sm_90 at -O3 as the Release build does, and fails on
  # a spill or a kernel past its register budget (ptxas's reports are cached, keyed by every file
  # of kernels/, device/ and base/: while none changes, no kernel is compiled for it); the
  # KernelCode tests disassemble the objects.
  step "3. real CUDA build: compile and link with nvcc, kernel resources, machine code"
  cmake --preset cuda -B build/cuda-check -DKVHEAP_BUILD_TESTS=ON -DKVHEAP_BUILD_DOCS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CXX_FLAGS_RELEASE=-O0 -DCMAKE_CUDA_FLAGS_RELEASE=-O0
  cmake --build build/cuda-check -j "$jobs"
  python3 scripts/kernel_resources.py --build build/cuda-check
  ctest --test-dir build/cuda-check -R "^KernelCode\." --output-on-failure --no-tests=error
  echo "[$SECONDS s]"

  # The CPU-only programs, without any CUDA code, and their CLI tests; the rest ran in step 1.
  # In a folder of its own (build/cpu-check), so that build/cpu stays the preset's optimised
  # build for the tour, and at -O1: these tests check what the programs print, not their speed,
  # and the fuzz build (step 5) compiles the same programs without CUDA as well.
  step "4. CPU-only build (no CUDA code at all): the CLI tests"
  cmake --preset cpu -B build/cpu-check -DKVHEAP_BUILD_DOCS=OFF -DKVHEAP_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG"
  cmake --build build/cpu-check -j "$jobs" --target test_cli
  ctest --test-dir build/cpu-check -j "$jobs" -R "Cli\." --output-on-failure --timeout 600 \
    --no-tests=error
  echo "[$SECONDS s]"
else
  step "1-4. CPU-only build: every test that needs no CUDA code, and the docs"
  build_and_test cpu docs
fi

step "5. fuzz targets, ${KVHEAP_FUZZ_SECONDS:-12} s each"
bash scripts/fuzz.sh "${KVHEAP_FUZZ_SECONDS:-12}"
echo "[$SECONDS s]"

step "6. format and lint"
bash scripts/lint.sh
echo "[$SECONDS s]"

if command -v ccache >/dev/null; then ccache --show-stats | grep -E "^ *(Hits|Misses):" || true; fi
step "all passed in $SECONDS s"
