#!/usr/bin/env bash
# scripts/gpu-check.sh OUTDIR: everything that needs a real NVIDIA GPU, in one command.
#
#   1. configure a real CUDA build for the local GPU (preset cuda-native) and build it, all cores
#   2. run the whole test suite on the GPU (tests that CI runs in the simulator run here for real)
#   3. compute-sanitizer: memcheck on small end-to-end cases (chapters 2, 4 and 5), racecheck on
#      the attention kernels
#   4. the GPU benchmarks, each under a time cap
#   5. end-to-end runs of chapters 2 and 4 on a Llama-3-8B-shaped model, and chapter 5's
#      scheduling benchmark on it
#   6. every result as JSON plus a markdown summary in OUTDIR (OUTDIR/summary.md first)
#
# Every step after the build runs even when an earlier one failed, so that one failing test does
# not cost the benchmark figures of a rare GPU session; the exit status is non-zero when any step
# failed, and summary.md and the last line name them. Sized to finish in under 8 minutes on a
# 16-core H100/H200 machine, and held to that: each step runs under its own time cap and under
# what is left of GPU_CHECK_BUDGET_S (480 s unless set); a step that finds the budget spent is
# reported as not run, and summary.md is always written.
#
# Dependencies: CUDA, CMake, Ninja and a C++ compiler must be on the machine. The libraries come
# from .gpu-bundle/ when it is there (scripts/gpu-bundle.sh packs it on a machine that can reach a
# Debian mirror; this one need not), else from scripts/install-deps.sh. The test checkpoint comes
# from KVHEAP_MODELS_DIR, else ../shared/models, else .gpu-bundle/models.
set -uo pipefail
out=$(realpath -m "${1:?usage: scripts/gpu-check.sh OUTDIR}")
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$out" || exit 1
start=$(date +%s)
budget=${GPU_CHECK_BUDGET_S:-480}
log() { printf '%s\n' "$@" | tee -a "$out/gpu-check.log"; }
failed=()  # the names of the steps that failed
status=()  # one "| step | result | seconds |" row per step, for summary.md

# capped SECONDS COMMAND...: runs COMMAND for at most SECONDS or what is left of the budget,
# whichever is less; exit status 124 when it ran out of time, 78 when no time was left to start.
capped() {
  local cap=$1 left
  shift
  left=$((budget - ($(date +%s) - start)))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -lt 10 ]; then
    log "gpu-check: the ${budget} s budget is spent: $(basename "$1") not started" >&2
    return 78
  fi
  timeout "$cap" "$@"
}

# step NAME COMMAND...: runs COMMAND, logs how it ended and how long it took, and remembers a
# failure instead of stopping. Exit status 77 means the machine could not run the check, 78 that
# the budget was spent before it started (both "not run"); 124 that it ran out of time.
step() {
  local name=$1 t0 rc result
  shift
  log "" "== $name =="
  t0=$(date +%s)
  "$@"
  rc=$?
  case $rc in
    0) result="ok" ;;
    77) result="not run on this machine" ;;
    78) result="**not run**: the time budget was spent" ;;
    124) result="**TIMED OUT**" ;;
    *) result="**FAILED** (exit $rc)" ;;
  esac
  status+=("| $name | $result | $(($(date +%s) - t0)) |")
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    failed+=("$name")
    log "gpu-check: $name: $result"
  fi
}

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU visible (nvidia-smi -L failed); this script is for GPU machines" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version \
  --format=csv | tee "$out/gpu.csv"

if ! command -v nvcc > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi
if [ -d .gpu-bundle/debs ]; then
  # Unpacked under build/deps, never into /, and found through the standard search variables.
  deps=$(pwd)/build/deps
  rm -rf "$deps" && mkdir -p "$deps" || exit 1
  for d in .gpu-bundle/debs/*.deb; do dpkg-deb -x "$d" "$deps" || exit 1; done
  export CMAKE_PREFIX_PATH="$deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  log "gpu-check: libraries from .gpu-bundle ($(find .gpu-bundle/debs -name '*.deb' | wc -l) packages)"
else
  bash scripts/install-deps.sh || log "gpu-check: install-deps failed (offline?); building with what is installed"
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
log "gpu-check: models from ${KVHEAP_MODELS_DIR:-nowhere (checkpoint tests will skip)}"
bin=build/cuda-native

build() {
  # CMAKE_POLICY_VERSION_MINIMUM lets CMake 4 read package files written for older CMake.
  cmake --preset cuda-native -DKVHEAP_BUILD_DOCS=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    >> "$out/build.log" 2>&1 &&
    capped "$budget" cmake --build --preset cuda-native -j "$(nproc)" >> "$out/build.log" 2>&1
}
step "1. configure and build (cuda-native, $(nproc) jobs)" build
if [ ${#failed[@]} -gt 0 ]; then  # nothing else can run; the log's end says why
  tail -30 "$out/build.log" >&2
  echo "gpu-check: the build failed; see $out/build.log" >&2
  exit 1
fi

tests() {
  # KVHEAP_CUDA_SYNC=1: a kernel that faults is named by its own launch, not by a later call.
  capped 240 env KVHEAP_CUDA_SYNC=1 ctest --test-dir "$bin" -j 8 --timeout 300 \
    --output-on-failure --output-junit "$out/ctest.xml" > "$out/ctest.log" 2>&1
  local rc=$?
  tail -5 "$out/ctest.log"
  return "$rc"
}
step "2. ctest on the GPU" tests

# compute-sanitizer cannot attach on some virtualised machines ("Device not supported"): that is
# the machine, not a finding, and is reported as such rather than as a failed check.
sanitize() {  # sanitize TOOL LOG COMMAND...
  local tool=$1 logf=$2 rc
  shift 2
  capped 150 compute-sanitizer --tool "$tool" --error-exitcode 3 "$@" > "$logf" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] && grep -q "Device not supported" "$logf"; then
    log "compute-sanitizer cannot attach to this machine's GPU: $tool not run"
    return 77
  fi
  tail -3 "$logf"
  return "$rc"
}
if command -v compute-sanitizer > /dev/null; then
  step "3a. compute-sanitizer memcheck (chapter 2 end to end)" sanitize memcheck "$out/memcheck.log" \
    "$bin/bin/ch02_contiguous_gpu" --model tiny --prompt-ids 1,2,3 --max-new-tokens 8 \
    --device cuda --no-peak --json
  # racecheck slows kernels by orders of magnitude: the main shapes and the split-K merge only.
  step "3b. compute-sanitizer racecheck (decode attention)" sanitize racecheck "$out/racecheck.log" \
    "$bin/tests/test_decode_attention" --gtest_brief=1 \
    --gtest_filter='DecodeAttention.MatchesTwinAcrossBatchesAndContextsFp32:DecodeAttention.SplitKEqualsSinglePass'
  # Chapter 4: forks that copy on write and share a prefix read once, end to end; then the
  # shared-prefix kernels' launches (gather, both passes with padding slices, merge).
  step "3c. compute-sanitizer memcheck (chapter 4 end to end)" sanitize memcheck \
    "$out/memcheck-ch04.log" "$bin/bin/ch04_cow_prefix_sharing" --model tiny \
    --prompt-ids 1,5,9,2,77,31,4,8,3,12,40,7,6,5,4,3,2 --samples 3 --block-size 4 \
    --max-new-tokens 8 --device cuda --no-peak --json
  step "3d. compute-sanitizer racecheck (shared-prefix attention)" sanitize racecheck \
    "$out/racecheck-ch04.log" "$bin/tests/test_ch04_shared_gpu" --gtest_brief=1 \
    --gtest_filter='Ch04SharedPrefixGpu.GroupsOfDifferentSizes'
  # Chapter 5: mixed batches of prompt chunks and decode rows in a pool small enough to preempt.
  step "3e. compute-sanitizer memcheck (chapter 5 end to end)" sanitize memcheck \
    "$out/memcheck-ch05.log" "$bin/bin/ch05_batched_scheduler" --model tiny --num-seqs 4 \
    --prompt-ids 1,2,3,4,5,6,7,8,9 --block-size 4 --max-batch-tokens 8 --kv-budget-mb 0.024 \
    --max-new-tokens 20 --device cuda --no-peak --json
else
  log "compute-sanitizer not found: step 3 skipped"
fi

bench() {  # bench EXECUTABLE
  local name args
  name=$(basename "$1")
  case $name in
    bench_decode_gpu) args=(--json-out="$out/$name.json") ;;  # a plain program, not a Google one
    # The paged benchmarks also write their block-size sweep (PREFIX.md and PREFIX.csv); those go
    # beside the other results, not into the working tree. The others ignore the extra flag.
    *) args=(--benchmark_out="$out/$name.json" --benchmark_out_format=json
      --sweep-out="$out/sweep-$name") ;;
  esac
  capped 180 "$1" "${args[@]}" > "$out/$name.md" 2> "$out/$name.err"
}
# The GPU's benchmarks only: the CPU ones (bench_*_cpu, bench_capacity) need no GPU and would
# spend the GPU machine's time.
for b in "$bin"/bench/bench_*; do
  if [ ! -f "$b" ] || [ ! -x "$b" ]; then continue; fi  # the folder also holds CMake's files
  # bench_scheduler serves a whole workload; it runs as a step of its own below.
  case $(basename "$b") in *_cpu | bench_capacity | bench_scheduler) continue ;; esac
  step "4. benchmark $(basename "$b")" bench "$b"
done

decode() {  # decode DTYPE: weights and cache in DTYPE
  capped 90 "$bin/bin/ch02_contiguous_gpu" --model llama-3-8b-4l --prompt-ids 1 --max-new-tokens 64 \
    --ignore-eos --weight-dtype "$1" --kv-dtype "$1" --device cuda --json \
    > "$out/ch02-llama-3-8b-4l-$1.json"
}
for wt in fp32 bf16; do step "5. chapter 2 end to end, $wt" decode "$wt"; done

# Chapter 4 end to end: 16 samples of one 2048-token prompt, the shared prefix read once and not.
prompt_ids=$(seq -s, 1 2048)
shared() {  # shared NAME FLAGS...
  local name=$1
  shift
  capped 90 "$bin/bin/ch04_cow_prefix_sharing" --model llama-3-8b-4l --prompt-ids "$prompt_ids" \
    --samples 16 --max-new-tokens 64 --ignore-eos --weight-dtype bf16 --kv-dtype bf16 \
    --device cuda --json "$@" > "$out/ch04-llama-3-8b-4l-$name.json"
}
step "5. chapter 4 end to end, read once" shared read-once
step "5. chapter 4 end to end, every row reads its context" shared per-row --no-read-once

# Chapter 5: one workload served one at a time, in static batches and continuously (checks that
# all four generate the same ids before it prints).
scheduler() {
  capped 150 "$bin/bench/bench_scheduler" --device cuda --model llama-3-8b-4l --weight-dtype bf16 \
    --kv-dtype bf16 > "$out/bench_scheduler.md" 2> "$out/bench_scheduler.err"
}
step "5. chapter 5: bench_scheduler on the device" scheduler

{
  echo "# gpu-check on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(($(date +%s) - start)) s, commit $(git rev-parse --short HEAD 2> /dev/null || echo unknown)"
  echo
  echo "| step | result | seconds |"
  echo "|---|---|---:|"
  printf '%s\n' "${status[@]}"
  echo
  for f in "$out"/*.md; do
    [ "$(basename "$f")" = summary.md ] || {
      echo "## $(basename "$f" .md)"
      echo
      cat "$f"
      echo
    }
  done
} > "$out/summary.md"
if [ ${#failed[@]} -gt 0 ]; then
  log "" "gpu-check: ${#failed[@]} step(s) FAILED in $(($(date +%s) - start)) s: $(IFS=';' && echo "${failed[*]}")"
  exit 1
fi
log "" "gpu-check: every step passed in $(($(date +%s) - start)) s: $out/summary.md"
