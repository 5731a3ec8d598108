#!/usr/bin/env bash
# Format and lint checks, as CI runs them.
#
#   scripts/lint.sh           fail on an unformatted file or a clang-tidy finding
#   scripts/lint.sh --fix     reformat every file in place first (then check)
#
# clang-tidy reads the compile commands of the simulator build (build/sim), which compiles every
# source, .cu files included (the build is configured if it is not there yet); it checks the
# library, kernel, simulator, chapter and fuzz sources. Tests and benchmarks are checked by the
# format step only, which keeps the lint step to a few minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."

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

[ -f build/sim/compile_commands.json ] || cmake --preset sim > /dev/null
echo "clang-tidy: checking the project's sources (.clang-tidy lists the checks)"
run-clang-tidy -p build/sim -quiet -j "$(nproc)" -extra-arg=-Wno-unknown-warning-option \
  "$(pwd)/(common|kernels|device|chapters|fuzz)/.*\.(cpp|cu)$" > build/clang-tidy.log 2>&1 || {
  grep -E "(warning|error):" build/clang-tidy.log | sort -u | head -40
  echo "clang-tidy: findings above (full log: build/clang-tidy.log)" >&2
  exit 1
}
echo "lint: clean"
