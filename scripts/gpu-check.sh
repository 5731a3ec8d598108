#!/usr/bin/env bash
# scripts/gpu-check.sh OUTDIR: everything that needs a real NVIDIA GPU, in one command.
#
#   1. configure a real CUDA build for the local GPU (preset cuda-native) and build it, all cores
#   2. run the whole test suite on the GPU (tests that CI runs in the simulator run here for real)
#   3. compute-sanitizer: memcheck on a small end-to-end case, racecheck on the attention kernel
#   4. the benchmarks, each under a time cap
#   5. every result as JSON plus a markdown summary in OUTDIR
#
# It fails loudly (non-zero exit, the failing step named) on any test failure, sanitizer report or
# mismatch. Sized to finish in under 8 minutes on a 16-core H100/H200 machine.
#
# Dependencies: CUDA, CMake, Ninja and a C++ compiler must be on the machine. The libraries come
# from .gpu-bundle/ when it is there (scripts/gpu-bundle.sh packs it on a machine that can reach a
# Debian mirror; this one need not), else from scripts/install-deps.sh. The test checkpoint comes
# from KVHEAP_MODELS_DIR, else ../shared/models, else .gpu-bundle/models.
set -euo pipefail
out=$(realpath -m "${1:?usage: scripts/gpu-check.sh OUTDIR}")
cd "$(dirname "$0")/.."
mkdir -p "$out"
log() { printf '\n== %s ==\n' "$*" | tee -a "$out/gpu-check.log"; }
start=$(date +%s)

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU visible (nvidia-smi -L failed); this script is for GPU machines" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version \
  --format=csv | tee "$out/gpu.csv"

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi
if [ -d .gpu-bundle/debs ]; then
  # Unpacked under build/deps, never into /, and found through the standard search variables.
  deps=$(pwd)/build/deps
  rm -rf "$deps" && mkdir -p "$deps"
  for d in .gpu-bundle/debs/*.deb; do dpkg-deb -x "$d" "$deps"; done
  export CMAKE_PREFIX_PATH="$deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "gpu-check: libraries from .gpu-bundle ($(ls .gpu-bundle/debs | wc -l) packages)" | tee -a "$out/gpu-check.log"
else
  bash scripts/install-deps.sh || echo "gpu-check: install-deps failed (offline?); building with what is installed"
fi
if [ -z "${KVHEAP_MODELS_DIR:-}" ]; then
  for m in ../shared/models .gpu-bundle/models; do
    if [ -d "$m" ]; then
      KVHEAP_MODELS_DIR=$(realpath "$m")
      export KVHEAP_MODELS_DIR
      break
    fi
  done
fi
echo "gpu-check: models from ${KVHEAP_MODELS_DIR:-nowhere (checkpoint tests will skip)}" | tee -a "$out/gpu-check.log"

log "1. configure and build (cuda-native, $(nproc) jobs)"
# CMAKE_POLICY_VERSION_MINIMUM lets CMake 4 read package files written for older CMake.
cmake --preset cuda-native -DKVHEAP_BUILD_DOCS=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 2>&1 |
  tee -a "$out/gpu-check.log" | tail -3
cmake --build --preset cuda-native -j "$(nproc)" 2>&1 | tee -a "$out/gpu-check.log" | tail -3
bin=build/cuda-native

log "2. ctest on the GPU"
ctest --test-dir "$bin" -j 8 --output-on-failure --output-junit "$out/ctest.xml" 2>&1 |
  tee "$out/ctest.log" | tail -5

log "3. compute-sanitizer"
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$bin/bin/ch02_contiguous_gpu" --model tiny --prompt-ids 1,2,3 --max-new-tokens 8 \
    --device cuda --no-peak --json > "$out/memcheck.json" 2> "$out/memcheck.log"
  # racecheck slows kernels by orders of magnitude: the main shapes and the split-K merge only.
  timeout 300 compute-sanitizer --tool racecheck --error-exitcode 3 \
    "$bin/tests/test_decode_attention" --gtest_brief=1 \
    --gtest_filter='DecodeAttention.MatchesTwinAcrossBatchesAndContextsFp32:DecodeAttention.SplitKEqualsSinglePass' \
    > "$out/racecheck.log" 2>&1
  echo "memcheck and racecheck: clean" | tee -a "$out/gpu-check.log"
else
  echo "compute-sanitizer not found: skipped" | tee -a "$out/gpu-check.log"
fi

log "4. benchmarks"
for b in "$bin"/bench/bench_*; do
  if [ ! -f "$b" ] || [ ! -x "$b" ]; then continue; fi  # the folder also holds CMake's files
  name=$(basename "$b")
  # The paged benchmarks also write their block-size sweep (PREFIX.md and PREFIX.csv); those go
  # beside the other results, not into the working tree. The others ignore the extra flag.
  timeout 180 "$b" --benchmark_out="$out/$name.json" --benchmark_out_format=json \
    --sweep-out="$out/sweep-$name" > "$out/$name.md" 2> "$out/$name.err" ||
    { echo "benchmark $name failed" >&2; exit 1; }
done

log "5. end-to-end runs"
for wt in fp32 bf16; do
  "$bin/bin/ch02_contiguous_gpu" --model llama-3-8b-4l --prompt-ids 1 --max-new-tokens 64 \
    --ignore-eos --weight-dtype "$wt" --kv-dtype "$wt" --device cuda --json > "$out/ch02-llama-3-8b-4l-$wt.json"
done

{
  echo "# gpu-check on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(( $(date +%s) - start )) s, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo
  for f in "$out"/*.md; do [ "$(basename "$f")" = summary.md ] || { echo "## $(basename "$f" .md)"; echo; cat "$f"; echo; }; done
} > "$out/summary.md"
log "done in $(( $(date +%s) - start )) s: $out/summary.md"
