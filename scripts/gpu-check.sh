#!/usr/bin/env bash
# scripts/gpu-check.sh OUTDIR: everything that needs a real NVIDIA GPU, in one command.
#
#   1. configure a real CUDA build for the local GPU (preset cuda-native) and build it, all cores
#   2. check that the GPU runs kernels at all (chapter 2 on the tiny model), else stop: a GPU test
#      that cannot reach a device skips, and every later step would pass with nothing tested
#   3. run the whole test suite on the GPU (tests that CI runs in the simulator run here for real)
#   4. the GPU benchmarks, each under a time cap
#   5. end-to-end runs of chapters 2 and 4 on a Llama-3-8B-shaped model, and chapter 5's
#      scheduling benchmark on it
#   6. compute-sanitizer: memcheck on small end-to-end cases (chapters 2, 4 and 5), racecheck on
#      the attention kernels
#   7. every result as JSON plus a markdown summary in OUTDIR (OUTDIR/summary.md first), also
#      printed at the end
#
# The steps that give the benchmark figures come before the sanitizers, which are the slowest:
# when the budget runs short, the sanitizers are the ones left out. Every step after the device
# check runs even when an earlier one failed, so that one failing test does not cost the figures
# of a rare GPU session. Exit status: 0 when every step passed; 1 when any failed, or when the
# build or the device check did; 2 when none failed but some were not run or cut short because
# the budget was spent. summary.md and the last line name them. Sized to finish in under 8
# minutes on a 16-core H100/H200 machine, and held to that: each step runs under its own time cap
# and under what is left of GPU_CHECK_BUDGET_S (480 s unless set); a step that finds the budget
# spent is reported as not run, one that the budget stops as cut short, and summary.md is written
# however the script ends. GPU_CHECK_COMMIT names the commit where the tree has no .git.
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
commit=${GPU_CHECK_COMMIT:-$(git rev-parse --short HEAD 2> /dev/null || echo unknown)}
log() { printf '%s\n' "$@" | tee -a "$out/gpu-check.log"; }
failed=()   # the names of the steps that failed
not_run=()  # the names of the steps the budget left out or cut short
skipped=()  # the names of the steps this machine could not run (compute-sanitizer, say)
status=()   # one "| step | result | seconds |" row per step, for summary.md
current=""  # the step running now, for capped's messages
stopped=""  # why the script stopped before its last step, if it did

# summary.md: the steps' table, then every result's markdown; written however the script ends
# (trap), and its table printed too, since that is what a reader of the output looks for first.
write_summary() {
  {
    echo "# gpu-check on $(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%MZ), $(($(date +%s) - start)) s, commit $commit"
    echo
    [ -n "$stopped" ] && echo "**Stopped early:** $stopped" && echo
    echo "| step | result | seconds |"
    echo "|---|---|---:|"
    [ ${#status[@]} -gt 0 ] && printf '%s\n' "${status[@]}"
  } > "$out/summary.head"
  {
    cat "$out/summary.head"
    echo
    for f in "$out"/*.md; do
      [ -s "$f" ] && [ "$(basename "$f")" != summary.md ] || continue  # skip empty results
      echo "## $(basename "$f" .md)"
      echo
      cat "$f"
      echo
    done
  } > "$out/summary.md"
  echo
  cat "$out/summary.head"
  rm -f "$out/summary.head"
}
trap write_summary EXIT

# capped SECONDS COMMAND...: runs COMMAND for at most SECONDS or what is left of the budget,
# whichever is less. Exit status 124 when it ran out of its own time, 79 when the budget stopped
# it first, 78 when no time was left to start it; otherwise COMMAND's. A command that ignores
# the stop signal is killed 15 s later.
capped() {
  local cap=$1 left short=0 rc t0
  shift
  t0=$(date +%s)
  left=$((budget - (t0 - start)))
  if [ "$left" -lt "$cap" ]; then
    cap=$left
    short=1
  fi
  if [ "$cap" -lt 10 ]; then
    log "gpu-check: the ${budget} s budget is spent: ${current:-$(basename "$1")} not started" >&2
    return 78
  fi
  timeout -k 15 "$cap" "$@"
  rc=$?
  # 124 (or 137 after the kill) is a time-out only if the time was up: a program may exit 137
  # itself, killed for memory, say, and that is a failure.
  if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ $(($(date +%s) - t0)) -ge $((cap - 1)) ]; then
    [ "$short" -eq 1 ] && return 79
    return 124
  fi
  [ "$rc" -eq 124 ] && return 1  # not out of time: report it as the failure it is
  return "$rc"
}

# step NAME COMMAND...: runs COMMAND, logs how it ended and how long it took, and remembers a
# failure instead of stopping. Exit status 77 means the machine could not run the check; 78 and
# 79 that the budget left it out or cut it short; 124 that it ran out of its own time.
step() {
  local name=$1 t0 rc result
  shift
  current=$name
  log "" "== $name =="
  t0=$(date +%s)
  "$@"
  rc=$?
  case $rc in
    0) result="ok" ;;
    77) result="not run on this machine" ;;
    78) result="**not run**: the time budget was spent" ;;
    79) result="**cut short**: the time budget ran out" ;;
    124) result="**TIMED OUT**" ;;
    *) result="**FAILED** (exit $rc)" ;;
  esac
  status+=("| $name | $result | $(($(date +%s) - t0)) |")
  case $rc in
    0) ;;
    77) skipped+=("$name") ;;
    78 | 79) not_run+=("$name") ;;
    *) failed+=("$name") ;;
  esac
  [ "$rc" -ne 0 ] && log "gpu-check: $name: $result"
  return "$rc"
}

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  stopped="no NVIDIA GPU visible (nvidia-smi -L failed); this script is for GPU machines"
  echo "gpu-check: $stopped" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version \
  --format=csv | tee "$out/gpu.csv"

if ! command -v nvcc > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi
# unpack DEB DIR: a Debian package's files under DIR, with dpkg-deb or, where there is none (a
# GPU image need not be Debian's), with ar and tar.
unpack() {
  if command -v dpkg-deb > /dev/null; then
    dpkg-deb -x "$1" "$2"
    return
  fi
  local deb data tmp rc
  deb=$(realpath "$1")
  data=$(ar t "$deb" | grep -m1 '^data\.tar') || return 1
  tmp=$(mktemp -d) || return 1
  (cd "$tmp" && ar x "$deb" "$data") && tar -xf "$tmp/$data" -C "$2"
  rc=$?
  rm -rf "$tmp"
  return "$rc"
}
if [ -d .gpu-bundle/debs ]; then
  # Unpacked under build/deps, never into /, and found through the standard search variables:
  # CMake finds the packages' config files under lib/<arch>/cmake only with a Debian-style
  # compiler, so that folder is named as a prefix too.
  deps=$(pwd)/build/deps
  arch=$(uname -m)-linux-gnu
  rm -rf "$deps" && mkdir -p "$deps" || {
    stopped="could not make $deps"
    exit 1
  }
  for d in .gpu-bundle/debs/*.deb; do
    unpack "$d" "$deps" || {
      stopped="could not unpack $d"
      exit 1
    }
  done
  export CMAKE_PREFIX_PATH="$deps/usr:$deps/usr/lib/$arch/cmake${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$deps/usr/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # PCRE2 and utf8proc are found through pkg-config, whose files say /usr: the sysroot moves them
  # to the unpacked copy, which the search path puts first.
  export PKG_CONFIG_PATH="$deps/usr/lib/$arch/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export PKG_CONFIG_SYSROOT_DIR="$deps"
  log "gpu-check: libraries from .gpu-bundle ($(find .gpu-bundle/debs -name '*.deb' | wc -l) packages)"
else
  log "gpu-check: no .gpu-bundle/ here: installing the libraries (a machine that cannot reach a" \
    "package mirror needs the bundle that scripts/gpu-bundle.sh packs where apt works)"
  capped 120 bash scripts/install-deps.sh ||
    log "gpu-check: install-deps failed (offline?); building with what is installed"
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
if ! step "1. configure and build (cuda-native, $(nproc) jobs)" build; then
  tail -30 "$out/build.log" >&2
  stopped="the build failed, so nothing else could run; see build.log"
  exit 1
fi

# One small run on the device before anything else: a GPU test that cannot reach the device skips
# with a message, so without this a broken driver would leave every later step "ok".
device_check() {
  capped 60 "$bin/bin/ch02_contiguous_gpu" --model tiny --prompt-ids 1 --max-new-tokens 2 \
    --device cuda --no-peak --json > "$out/device-check.log" 2>&1
}
if ! step "2. the GPU runs chapter 2 on the tiny model" device_check; then
  cat "$out/device-check.log" >&2
  stopped="the GPU could not run chapter 2 on the tiny model (device-check.log), so no test or benchmark would have measured it"
  exit 1
fi

tests() {
  # KVHEAP_CUDA_SYNC=1: a kernel that faults is named by its own launch, not by a later call.
  # One hung test must not take the whole step: each gets 90 s, well inside the step's cap.
  capped 180 env KVHEAP_CUDA_SYNC=1 ctest --test-dir "$bin" -j 8 --timeout 90 \
    --output-on-failure --output-junit "$out/ctest.xml" > "$out/ctest.log" 2>&1
  local rc=$?
  tail -5 "$out/ctest.log"
  return "$rc"
}
step "3. ctest on the GPU" tests

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
  capped 120 "$1" "${args[@]}" > "$out/$name.md" 2> "$out/$name.err"
}
# The GPU's benchmarks only: the CPU ones (bench_*_cpu, bench_capacity) need no GPU and would
# spend the GPU machine's time. The two the chapters' goals are stated for come first.
for name in bench_attention_gpu bench_paged_attention_gpu bench_shared_prefix_gpu bench_decode_gpu; do
  if [ -x "$bin/bench/$name" ]; then
    step "4. benchmark $name" bench "$bin/bench/$name"
  else
    step "4. benchmark $name (not built)" false
  fi
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

missing() {  # missing MESSAGE: a check this machine cannot run
  log "gpu-check: $1"
  return 77
}

# compute-sanitizer cannot attach on some virtualised machines ("Device not supported"): that is
# the machine, not a finding, and is reported as such rather than as a failed check; the other
# sanitizer steps are then not tried.
sanitizer_attaches=yes
sanitize() {  # sanitize TOOL LOG COMMAND...
  local tool=$1 logf=$2 rc
  shift 2
  if [ "$sanitizer_attaches" = no ]; then return 77; fi
  capped 120 compute-sanitizer --tool "$tool" --error-exitcode 3 "$@" > "$logf" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] && grep -q "Device not supported" "$logf"; then
    log "compute-sanitizer cannot attach to this machine's GPU: $tool not run"
    sanitizer_attaches=no
    return 77
  fi
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logf" | tail -1
  return "$rc"
}
if command -v compute-sanitizer > /dev/null; then
  step "6a. compute-sanitizer memcheck (chapter 2 end to end)" sanitize memcheck "$out/memcheck.log" \
    "$bin/bin/ch02_contiguous_gpu" --model tiny --prompt-ids 1,2,3 --max-new-tokens 8 \
    --device cuda --no-peak --json
  # racecheck slows kernels by orders of magnitude: the main shapes and the split-K merge only.
  step "6b. compute-sanitizer racecheck (decode attention)" sanitize racecheck "$out/racecheck.log" \
    "$bin/tests/test_decode_attention" --gtest_brief=1 \
    --gtest_filter='DecodeAttention.MatchesTwinAcrossBatchesAndContextsFp32:DecodeAttention.SplitKEqualsSinglePass'
  # Chapter 4: forks that copy on write and share a prefix read once, end to end; then the
  # shared-prefix kernels' launches (gather, both passes with padding slices, merge).
  step "6c. compute-sanitizer memcheck (chapter 4 end to end)" sanitize memcheck \
    "$out/memcheck-ch04.log" "$bin/bin/ch04_cow_prefix_sharing" --model tiny \
    --prompt-ids 1,5,9,2,77,31,4,8,3,12,40,7,6,5,4,3,2 --samples 3 --block-size 4 \
    --max-new-tokens 8 --device cuda --no-peak --json
  step "6d. compute-sanitizer racecheck (shared-prefix attention)" sanitize racecheck \
    "$out/racecheck-ch04.log" "$bin/tests/test_ch04_shared_gpu" --gtest_brief=1 \
    --gtest_filter='Ch04SharedPrefixGpu.GroupsOfDifferentSizes'
  # Chapter 5: mixed batches of prompt chunks and decode rows in a pool small enough to preempt.
  step "6e. compute-sanitizer memcheck (chapter 5 end to end)" sanitize memcheck \
    "$out/memcheck-ch05.log" "$bin/bin/ch05_batched_scheduler" --model tiny --num-seqs 4 \
    --prompt-ids 1,2,3,4,5,6,7,8,9 --block-size 4 --max-batch-tokens 8 --kv-budget-mb 0.024 \
    --max-new-tokens 20 --device cuda --no-peak --json
else
  step "6. compute-sanitizer" missing "compute-sanitizer not found: no sanitizer run"
fi

took=$(($(date +%s) - start))
if [ ${#failed[@]} -gt 0 ]; then
  log "" "gpu-check: ${#failed[@]} step(s) FAILED in $took s: $(IFS=';' && echo "${failed[*]}")"
  [ ${#not_run[@]} -gt 0 ] && log "gpu-check: not run or cut short: $(IFS=';' && echo "${not_run[*]}")"
  exit 1
fi
if [ ${#not_run[@]} -gt 0 ]; then
  log "" "gpu-check: no step failed, but ${#not_run[@]} were not run or cut short by the ${budget} s" \
    "budget in $took s: $(IFS=';' && echo "${not_run[*]}")"
  exit 2
fi
if [ ${#skipped[@]} -gt 0 ]; then
  log "" "gpu-check: every step this machine could run passed in $took s; it could not run:" \
    "$(IFS=';' && echo "${skipped[*]}")"
else
  log "" "gpu-check: every step passed in $took s: $out/summary.md"
fi
