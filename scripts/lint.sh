#!/usr/bin/env bash
# Format and lint checks, as CI runs them.
#
#   scripts/lint.sh           fail on an unformatted file or a clang-tidy finding
#   scripts/lint.sh --fix     reformat every file in place first (then check)
#
# clang-tidy reads the compile commands of a simulator build, which compiles every source, .cu
# files included. It configures one of its own (build/lint, nothing is built there) without the
# precompiled headers, so that each file is checked with its own includes and clang never meets
# GCC's precompiled header. It checks the library, kernel, simulator, chapter and fuzz sources;
# tests and benchmarks are checked by the format step only, which keeps the lint step to a few
# minutes on two cores. scripts/tidy_cached.py runs it, skipping the sources it found clean before
# with every file they include as it is now.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p build
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
fi

echo "clang-format: checking ${#files[@]} files"
if ! clang-format --dry-run --Werror "${files[@]}" 2> build/clang-format.log; then
  grep -E "^[^ ].*: (error|warning)" build/clang-format.log | sed 's/: error:.*//' | sort -u | head -20
  echo "clang-format: the files above are not formatted; run scripts/lint.sh --fix" >&2
  exit 1
fi

cmake --preset sim -B build/lint -DKVHEAP_PCH=OFF -DKVHEAP_BUILD_DOCS=OFF -DKVHEAP_BUILD_BENCH=OFF \
  > build/lint-configure.log || {
  cat build/lint-configure.log >&2
  exit 1
}
echo "clang-tidy: checking the project's sources (.clang-tidy lists the checks)"
python3 scripts/tidy_cached.py --build build/lint \
  "$(pwd)/(base|common|kernels|device|chapters|fuzz)/.*\.(cpp|cu)$" > build/clang-tidy.log 2>&1 || {
  grep -E "(warning|error):" build/clang-tidy.log | sort -u | head -40
  echo "clang-tidy: findings above (full log: build/clang-tidy.log)" >&2
  exit 1
}
grep "^clang-tidy:" build/clang-tidy.log || true
echo "lint: clean"
