#!/usr/bin/env bash
# scripts/gpu-check.sh OUTDIR: everything that needs a real NVIDIA GPU, in one command.
# scripts/gpu-check.sh --plan: the steps and their time caps, on any machine; nothing runs.
#
#   0. up-front checks, before anything is built: a GPU that nvidia-smi sees, a driver new enough
#      for the CUDA toolkit (CUDA 13 needs R580, CUDA 12 R525), CMake 3.25+, Ninja (else make), a
#      C++ compiler whose C++20 programs run here, and, with a bundle, a glibc and libstdc++ that
#      provide every symbol version the bundled libraries need. Each stops the script at once,
#      naming what is missing, instead of failing as a build error minutes later.
#   1. configure a real CUDA build for the local GPU (preset cuda-native) and build the target
#      gpu_check, all cores: the test programs that reach the device, the chapter programs and
#      the GPU benchmarks (the tests that never touch the device run in CI)
#   2. check that the GPU runs kernels at all (chapter 2 on the tiny model), else stop: a GPU test
#      that cannot reach a device skips, and every later step would pass with nothing tested
#   3. the tests labelled `device`, on the GPU
#   4. the GPU benchmarks, each table with the bandwidth roofline's prediction beside the
#      measurement (docs/pages/gpu_performance_model.md)
#   5. end-to-end runs of chapters 2 and 4 on a Llama-3-8B-shaped model, chapter 4 both reading
#      the shared prefix once and per row, which must give the same ids up to near ties
#      (scripts/compare_ids.py), chapter 5's scheduling benchmark on it, and the ladder: the
#      tour's workload through chapters 2-5 on the device (scripts/tour.py)
#   6. compute-sanitizer: memcheck on small end-to-end cases (chapters 2, 4 and 5), racecheck on
#      the attention kernels
#   7. every result as JSON or markdown plus a summary in OUTDIR (OUTDIR/summary.md first), its
#      table also printed at the end
#
# The steps come in order of value and each runs under its own time cap; the caps add up to less
# than the default budget (GPU_CHECK_BUDGET_S, 480 s), so on a machine as fast as planned nothing
# is left out, and the budget still bounds the whole run on a slower one. A step that reaches its
# cap, or the budget, is "cut short", not failed; a step the budget leaves no time for is "not
# run". Every step after the device check runs even when an earlier one failed, so one failing
# test does not cost the figures of a rare GPU session. KVHEAP_CUDA_SYNC=1 for the tests, the
# end-to-end runs and the sanitizers, so a kernel fault names its own launch; not for the
# benchmarks (step 4, chapter 5's and the ladder), whose times it would change.
#
# Exit status: 0 when every step passed; 1 when an up-front check or a step failed, or the build
# or the device check did not pass; 2 when none failed but some were not run or cut short.
# summary.md, written however the script ends, and the last line name them. GPU_CHECK_COMMIT
# names the commit where the tree has no .git.
#
# Dependencies: CUDA, CMake, Ninja and a C++ compiler must be on the machine (CUDA_HOME, else
# /usr/local/cuda, is searched for nvcc when it is not on PATH). The libraries come from
# .gpu-bundle/ when it is there (scripts/gpu-bundle.sh packs it on a Debian or Ubuntu machine that
# can reach a mirror), else they must be installed (scripts/install-deps.sh). The test checkpoint
# comes from KVHEAP_MODELS_DIR, else ../shared/models, else .gpu-bundle/models.
set -uo pipefail

# The steps' time caps in seconds, in order of value. They add up to 538 s, leaving 22 s of the
# default budget for the up-front checks and unpacking the bundle.
declare -A cap=(
  [build]=120 [device]=20 [ctest]=50
  [bench_attention_gpu]=25 [bench_paged_attention_gpu]=35 [bench_shared_prefix_gpu]=25
  [bench_decode_gpu]=30
  [e2e_ch02]=12 [e2e_ch04_once]=12 [e2e_ch04_rows]=12 [same_ids_ch04]=5 [e2e_ch05]=30
  [ladder]=110
  [memcheck_ch02]=10 [racecheck_decode]=12 [memcheck_ch04]=10 [racecheck_ch04]=10
  [memcheck_ch05]=10
)
order=(build device ctest bench_attention_gpu bench_paged_attention_gpu bench_shared_prefix_gpu
  bench_decode_gpu e2e_ch02 e2e_ch04_once e2e_ch04_rows same_ids_ch04 e2e_ch05 ladder memcheck_ch02
  racecheck_decode memcheck_ch04 racecheck_ch04 memcheck_ch05)
default_budget=560
# GPU_CHECK_CAP_<step>=SECONDS (e.g. GPU_CHECK_CAP_build=300) sets one step's cap, for a machine
# slower or faster than planned; GPU_CHECK_BUDGET_S still bounds the whole run.
for s in "${order[@]}"; do
  v=GPU_CHECK_CAP_$s
  if [ -n "${!v:-}" ]; then
    case ${!v} in
      *[!0-9]* | 0) echo "gpu-check: $v must be a whole number of seconds, not '${!v}'" >&2 && exit 2 ;;
    esac
    cap[$s]=${!v}
  fi
done
if [ "${1:-}" = --plan ]; then
  total=0
  for s in "${order[@]}"; do
    printf '%-28s %4d s\n' "$s" "${cap[$s]}"
    total=$((total + cap[$s]))
  done
  printf '%-28s %4d s of the default %d s budget\n' total "$total" "$default_budget"
  exit 0
fi

out=$(realpath -m "${1:?usage: scripts/gpu-check.sh OUTDIR (or --plan)}")
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$out" || exit 1
start=$(date +%s)
budget=${GPU_CHECK_BUDGET_S:-$default_budget}
commit=${GPU_CHECK_COMMIT:-$(git rev-parse --short HEAD 2> /dev/null || echo unknown)}
log() { printf '%s\n' "$@" | tee -a "$out/gpu-check.log"; }
failed=()   # the names of the steps that failed
not_run=()  # the names of the steps the budget left out or cut short
skipped=()  # the names of the steps this machine could not run (compute-sanitizer, say)
status=()   # one "| step | result | seconds |" row per step, for summary.md
current=""  # the step running now, for capped's messages
stopped=""  # why the script stopped before its last step, if it did
gpu_name="" # what nvidia-smi calls the GPU, once the up-front checks found one
last_cap="" # the cap the running step's command ran under, once capped has started it

# summary.md: the steps' table, then every result's markdown; written however the script ends
# (trap), and its table printed too, since that is what a reader of the output looks for first.
write_summary() {
  {
    echo "# gpu-check on ${gpu_name:-no GPU found}"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%MZ), $(($(date +%s) - start)) s, commit $commit"
    [ -s "$out/versions.txt" ] && echo && sed 's/^/    /' "$out/versions.txt"
    echo
    [ -n "$stopped" ] && echo "**Stopped early:** $stopped" && echo
    echo "| step | result | seconds | cap s |"
    echo "|---|---|---:|---:|"
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
probe_dir=""  # the up-front checks' scratch folder, removed however the script ends
trap 'write_summary; rm -rf "$probe_dir"' EXIT

# stop MESSAGE: ends the script with exit status 1, MESSAGE on stderr and in summary.md.
stop() {
  stopped=$1
  log "gpu-check: $1" >&2
  exit 1
}

# capped SECONDS COMMAND...: runs COMMAND for at most SECONDS or what is left of the budget,
# whichever is less. Exit status 124 when it ran out of its own time, 79 when the budget stopped
# it first, 78 when no time was left to start it; otherwise COMMAND's. A command that ignores
# the stop signal is killed 15 s later.
capped() {
  local limit=$1 left short=0 rc t0
  shift
  t0=$(date +%s)
  left=$((budget - (t0 - start)))
  if [ "$left" -lt "$limit" ]; then
    limit=$left
    short=1
  fi
  last_cap=$limit
  if [ "$short" -eq 1 ] && [ "$limit" -lt 5 ]; then
    log "gpu-check: the ${budget} s budget is spent: ${current:-$(basename "$1")} not started" >&2
    last_cap=""
    return 78
  fi
  timeout -k 15 "$limit" "$@"
  rc=$?
  # 124 (or 137 after the kill) is a time-out only if the time was up: a program may exit 137
  # itself, killed for memory, say, and that is a failure.
  if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ $(($(date +%s) - t0)) -ge $((limit - 1)) ]; then
    [ "$short" -eq 1 ] && return 79
    return 124
  fi
  [ "$rc" -eq 124 ] && return 1  # not out of time: report it as the failure it is
  return "$rc"
}

# step NAME COMMAND...: runs COMMAND, logs how it ended and how long it took, and remembers a
# failure instead of stopping. Exit status 77 means the machine could not run the check; 78 that
# the budget left it out; 79 and 124 that the budget or the step's own cap cut it short.
step() {
  local name=$1 t0 rc result
  shift
  current=$name
  last_cap=""
  log "" "== $name =="
  t0=$(date +%s)
  "$@"
  rc=$?
  case $rc in
    0) result="ok" ;;
    77) result="not run on this machine" ;;
    78) result="**not run**: the time budget was spent" ;;
    79) result="**cut short**: the ${budget} s budget ran out" ;;
    124) result="**cut short** at its ${last_cap} s cap" ;;
    *)
      result="**FAILED** (exit $rc)"
      # A program killed by a signal (SIGILL, SIGSEGV) is named by it: the crash, not an answer.
      if [ "$rc" -gt 128 ] && sig=$(kill -l $((rc - 128)) 2> /dev/null); then
        result="**FAILED** (killed by SIG$sig, exit $rc)"
      fi
      ;;
  esac
  status+=("| $name | $result | $(($(date +%s) - t0)) | ${last_cap:--} |")
  case $rc in
    0) ;;
    77) skipped+=("$name") ;;
    78 | 79 | 124) not_run+=("$name") ;;
    *) failed+=("$name") ;;
  esac
  [ "$rc" -ne 0 ] && log "gpu-check: $name: $result"
  return "$rc"
}

# ---- 0. up-front checks ------------------------------------------------------------------------

# version_ge A B: whether version A is B or later (numeric fields, as sort -V orders them).
version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]; }

# nvidia-smi hangs on some broken drivers: every call is bounded.
smi() { timeout 20 nvidia-smi "$@"; }
if ! command -v nvidia-smi > /dev/null; then
  stop "no nvidia-smi on PATH: no NVIDIA driver is installed, and this script is for GPU machines"
fi
if ! smi -L > /dev/null 2>&1; then
  stop "nvidia-smi -L failed: the NVIDIA driver sees no GPU here (or does not answer within 20 s)"
fi
gpu_name=$(smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)
driver=$(smi --query-gpu=driver_version --format=csv,noheader 2> /dev/null | head -1 | tr -d ' ')
smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv \
  > "$out/gpu.csv" 2> /dev/null
cat "$out/gpu.csv"

cuda_home=${CUDA_HOME:-/usr/local/cuda}
if ! command -v nvcc > /dev/null && [ -x "$cuda_home/bin/nvcc" ]; then
  export PATH="$PATH:$cuda_home/bin"
fi
command -v nvcc > /dev/null ||
  stop "no nvcc (the CUDA toolkit) on PATH or in $cuda_home/bin: install the CUDA toolkit, 12.0 or newer"
toolkit=$(nvcc --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -1)
[ -n "$toolkit" ] || stop "cannot read the CUDA version from 'nvcc --version' ($(command -v nvcc))"
# The oldest driver each toolkit's major version runs on (CUDA's minor version compatibility):
# the CUDA Toolkit release notes, table "CUDA Toolkit and Minimum Required Driver Version for
# CUDA Minor Version Compatibility".
case ${toolkit%%.*} in
  12) need_driver=525 ;;
  13) need_driver=580 ;;
  *)
    if version_ge "$toolkit" 14; then
      need_driver=""  # newer than this script knows: the device check will tell
    else
      stop "CUDA $toolkit ($(command -v nvcc)) is too old: kvheap needs CUDA 12.0 or newer (C++20 in device code)"
    fi
    ;;
esac
case $driver in
  [0-9]*.*) ;;
  *) stop "cannot read the driver version from nvidia-smi (got '$driver')" ;;
esac
if [ -n "$need_driver" ] && ! version_ge "$driver" "$need_driver"; then
  if [ "$need_driver" = 580 ]; then
    remedy="install driver R580 or newer, or put a CUDA 12 toolkit (which needs R525) first on PATH"
  else
    remedy="install driver R525 or newer"
  fi
  stop "the NVIDIA driver is $driver, but CUDA $toolkit ($(command -v nvcc)) needs driver R$need_driver or newer: $remedy"
fi

cmake_version=$(cmake --version 2> /dev/null | sed -n 's/^cmake version \([0-9.]*\).*/\1/p')
[ -n "$cmake_version" ] || stop "no cmake on PATH: the build needs CMake 3.25 or newer"
version_ge "$cmake_version" 3.25 ||
  stop "cmake $cmake_version is too old: the presets (CMakePresets.json, version 6) need CMake 3.25 or newer"
# The presets build with Ninja; a GPU image without it but with make still builds, with make.
generator=()
if ! command -v ninja > /dev/null; then
  command -v make > /dev/null ||
    stop "neither ninja nor make on PATH: the build needs one (package ninja-build, or make)"
  generator=(-G "Unix Makefiles")
  log "gpu-check: no ninja on PATH: building with make instead"
fi

# A C++20 program built and run here: the compiler works, and the C++ runtime its programs load
# here is the one they were built for (test discovery runs every test program during the build).
# The libraries it loads are also what the bundle's needs are checked against.
cxx=${CXX:-c++}
command -v "$cxx" > /dev/null || stop "no C++ compiler ($cxx) on PATH: the build needs g++ 12+ or clang++ 15+"
probe_dir=$(mktemp -d) || exit 1
printf '%s\n' '#include <span>' '#include <string>' '#include <iostream>' \
  'int main() { std::string s = "ok"; std::span<const char> v(s); std::cout << v.size() << "\n"; }' \
  > "$probe_dir/probe.cpp"
if ! "$cxx" -std=c++20 -o "$probe_dir/probe" "$probe_dir/probe.cpp" > "$probe_dir/log" 2>&1 ||
  ! "$probe_dir/probe" >> "$probe_dir/log" 2>&1; then
  why=$(tail -3 "$probe_dir/log" | tr '\n' ' ')
  stop "$cxx ($("$cxx" --version 2> /dev/null | head -1)) cannot build and run a C++20 program here: $why"
fi
{
  echo "driver $driver, CUDA $toolkit ($(command -v nvcc)), cmake $cmake_version"
  echo "compiler: $("$cxx" --version | head -1)"
} > "$out/versions.txt"

if [ -d .gpu-bundle/debs ]; then
  # shellcheck source=scripts/gpu-bundle-env.sh
  . scripts/gpu-bundle-env.sh
  use_gpu_bundle "$probe_dir/probe" || stop "$bundle_error"
  log "gpu-check: $bundle_note"
  echo "bundle: $bundle_packed_on" >> "$out/versions.txt"
else
  log "gpu-check: no .gpu-bundle/ here: building with the libraries installed on this machine"
fi
rm -rf "$probe_dir"
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

# ---- 1-2. the build, and the device check ------------------------------------------------------

build() {
  # CMAKE_POLICY_VERSION_MINIMUM lets CMake 4 read package files written for older CMake.
  # KVHEAP_PYTHON_OPTIONAL: GPU machines often set CI, and under CI a missing Python would fail
  # the configure for the tour's tests, which this script does not run.
  capped "${cap[build]}" bash -c 'cmake --preset cuda-native "$@" && \
    cmake --build --preset cuda-native -j "$(nproc)" --target gpu_check' configure \
    "${generator[@]}" -DKVHEAP_BUILD_DOCS=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DKVHEAP_PYTHON_OPTIONAL=ON >> "$out/build.log" 2>&1
}
if ! step "1. configure and build the target gpu_check (cuda-native, $(nproc) jobs)" build; then
  tail -30 "$out/build.log" >&2
  package=$(sed -n 's/.*provided by "\([^"]*\)".*/\1/p' "$out/build.log" | head -1)
  if [ -n "$package" ]; then
    stop "the configure found no $package: bring .gpu-bundle/ (scripts/gpu-bundle.sh) or install the libraries (scripts/install-deps.sh); see build.log"
  fi
  stop "the build did not finish (${status[-1]}), so nothing else could run; see build.log"
fi

# One small run on the device before anything else: a GPU test that cannot reach the device skips
# with a message, so without this a broken driver would leave every later step "ok".
device_check() {
  capped "${cap[device]}" env KVHEAP_CUDA_SYNC=1 "$bin/bin/ch02_contiguous_gpu" --model tiny \
    --prompt-ids 1 --max-new-tokens 2 --device cuda --no-peak --json > "$out/device-check.log" 2>&1
}
if ! step "2. the GPU runs chapter 2 on the tiny model" device_check; then
  cat "$out/device-check.log" >&2
  stop "the GPU could not run chapter 2 on the tiny model (device-check.log), so no test or benchmark would have measured it"
fi

# ---- 3. the tests ------------------------------------------------------------------------------

tests() {
  # One hung test must not take the whole step: each gets 40 s, well inside the step's cap.
  # --no-tests=error: a label that matched nothing must not pass as an empty success.
  capped "${cap[ctest]}" env KVHEAP_CUDA_SYNC=1 ctest --test-dir "$bin" -L device -j "$(nproc)" \
    --timeout 40 --no-tests=error --output-on-failure --output-junit "$out/ctest.xml" \
    > "$out/ctest.log" 2>&1
  local rc=$?
  tail -5 "$out/ctest.log"
  return "$rc"
}
step "3. the tests that reach the device (ctest -L device)" tests

# ---- 4. the benchmarks -------------------------------------------------------------------------

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
  capped "${cap[$name]}" "$1" "${args[@]}" > "$out/$name.md" 2> "$out/$name.err"
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

# ---- 5. end to end -----------------------------------------------------------------------------

# KVHEAP_CUDA_SYNC=1: each launch is waited for, so a kernel fault names its own launch. That
# slows every step by a launch's latency; the decode step's own time is bench_decode_gpu's.
decode() {
  capped "${cap[e2e_ch02]}" env KVHEAP_CUDA_SYNC=1 "$bin/bin/ch02_contiguous_gpu" \
    --model llama-3-8b-4l --prompt-ids 1 --max-new-tokens 64 --ignore-eos --weight-dtype bf16 \
    --kv-dtype bf16 --device cuda --json > "$out/ch02-llama-3-8b-4l-bf16.json"
}
step "5. chapter 2 end to end, bf16 (launches synchronised)" decode

# Chapter 4 end to end: 16 samples of one 2048-token prompt, the shared prefix read once and not.
prompt_ids=$(seq -s, 1 2048)
shared() {  # shared NAME CAP FLAGS...
  local name=$1 c=$2
  shift 2
  capped "$c" env KVHEAP_CUDA_SYNC=1 "$bin/bin/ch04_cow_prefix_sharing" --model llama-3-8b-4l \
    --prompt-ids "$prompt_ids" --samples 16 --max-new-tokens 64 --ignore-eos --weight-dtype bf16 \
    --kv-dtype bf16 --device cuda --json "$@" > "$out/ch04-llama-3-8b-4l-$name.json"
}
step "5. chapter 4 end to end, read once (launches synchronised)" shared read-once \
  "${cap[e2e_ch04_once]}"
step "5. chapter 4 end to end, every row reads its context (launches synchronised)" shared per-row \
  "${cap[e2e_ch04_rows]}" --no-read-once --top2-gaps

# The two chapter 4 runs must give every sample the same greedy ids; where they differ, the
# per-row run's top-2 logit gap (--top2-gaps) tells a near tie, which is allowed, from a real
# difference, which fails.
same_ids() {
  if ! command -v python3 > /dev/null; then
    log "gpu-check: no python3: chapter 4's two runs were not compared"
    return 77
  fi
  capped "${cap[same_ids_ch04]}" python3 scripts/compare_ids.py \
    "$out/ch04-llama-3-8b-4l-per-row.json" "$out/ch04-llama-3-8b-4l-read-once.json" \
    > "$out/same-ids-ch04.txt" 2>&1
  local rc=$?
  cat "$out/same-ids-ch04.txt"
  return "$rc"
}
step "5. chapter 4: read once gives the per-row run's ids, up to near ties" same_ids

# Chapter 5: one workload served one at a time, in static batches and continuously (checks that
# all four generate the same ids before it prints). A benchmark: its launches are not waited for
# one by one, since the host's share of a pass is what it measures (its phase table).
scheduler() {
  capped "${cap[e2e_ch05]}" "$bin/bench/bench_scheduler" --device cuda --model llama-3-8b-4l \
    --weight-dtype bf16 --kv-dtype bf16 > "$out/bench_scheduler.md" 2> "$out/bench_scheduler.err"
}
step "5. chapter 5: bench_scheduler on the device" scheduler

# The ladder on the GPU: the tour's workload (64 requests here) through chapters 2-5 on the
# device, on the Llama-3-8B shape with a bf16 cache, every chapter's ids checked against chapter
# 1, the CPU oracle, on the first 8 requests. The weights stay fp32: the oracle computes in fp32,
# and bf16 weights would part from it beyond what its near-tie threshold allows.
ladder() {
  if ! command -v python3 > /dev/null; then
    log "gpu-check: no python3: the ladder was not run"
    return 77
  fi
  capped "${cap[ladder]}" python3 scripts/tour.py --bin "$bin/bin" --device cuda \
    --model llama-3-8b-4l --kv-dtype bf16 --requests 64 --oracle-requests 8 \
    --out "$out/ladder-gpu.md" --images "$out" > "$out/ladder.log" 2>&1
  local rc=$?
  tail -3 "$out/ladder.log"
  return "$rc"
}
step "5. the ladder: the tour's workload through chapters 2-5 on the device" ladder

# ---- 6. the sanitizers -------------------------------------------------------------------------

missing() {  # missing MESSAGE: a check this machine cannot run
  log "gpu-check: $1"
  return 77
}

# compute-sanitizer cannot attach on some virtualised machines ("Device not supported"): that is
# the machine, not a finding, and is reported as such rather than as a failed check; the other
# sanitizer steps are then not tried.
sanitizer_attaches=yes
sanitize() {  # sanitize CAP TOOL LOG COMMAND...
  local c=$1 tool=$2 logf=$3 rc
  shift 3
  if [ "$sanitizer_attaches" = no ]; then return 77; fi
  capped "$c" env KVHEAP_CUDA_SYNC=1 compute-sanitizer --tool "$tool" --error-exitcode 3 "$@" \
    > "$logf" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] && grep -q "Device not supported" "$logf"; then
    log "compute-sanitizer cannot attach to this machine's GPU: $tool not run"
    sanitizer_attaches=no
    return 77
  fi
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$logf" | tail -1
  # A test filter that matches no test (a test renamed) passes with nothing checked.
  if grep -q '^\[==========\] 0 tests' "$logf"; then
    log "gpu-check: $tool ran no test: its --gtest_filter matches none in this build"
    return 1
  fi
  return "$rc"
}
if command -v compute-sanitizer > /dev/null; then
  step "6a. compute-sanitizer memcheck (chapter 2 end to end)" sanitize "${cap[memcheck_ch02]}" \
    memcheck "$out/memcheck.log" "$bin/bin/ch02_contiguous_gpu" --model tiny --prompt-ids 1,2,3 \
    --max-new-tokens 8 --device cuda --no-peak --json
  # racecheck slows kernels by orders of magnitude: the main shapes and the split-K merge only.
  step "6b. compute-sanitizer racecheck (decode attention)" sanitize "${cap[racecheck_decode]}" \
    racecheck "$out/racecheck.log" "$bin/tests/test_decode_attention" --gtest_brief=1 \
    --gtest_filter='DecodeAttention.MatchesTwinAcrossBatchesAndContextsFp32:DecodeAttention.SplitKEqualsSinglePass'
  # Chapter 4: forks that copy on write and share a prefix read once, end to end; then the
  # shared-prefix kernels' launches (gather, both passes with padding slices, merge).
  step "6c. compute-sanitizer memcheck (chapter 4 end to end)" sanitize "${cap[memcheck_ch04]}" \
    memcheck "$out/memcheck-ch04.log" "$bin/bin/ch04_cow_prefix_sharing" --model tiny \
    --prompt-ids 1,5,9,2,77,31,4,8,3,12,40,7,6,5,4,3,2 --samples 3 --block-size 4 \
    --max-new-tokens 8 --device cuda --no-peak --json
  step "6d. compute-sanitizer racecheck (shared-prefix attention)" sanitize \
    "${cap[racecheck_ch04]}" racecheck "$out/racecheck-ch04.log" "$bin/tests/test_ch04_shared_gpu" \
    --gtest_brief=1 --gtest_filter='Ch04SharedPrefixGpu.GroupsOfDifferentSizes'
  # Chapter 5: mixed batches of prompt chunks and decode rows in a pool small enough to preempt.
  step "6e. compute-sanitizer memcheck (chapter 5 end to end)" sanitize "${cap[memcheck_ch05]}" \
    memcheck "$out/memcheck-ch05.log" "$bin/bin/ch05_batched_scheduler" --model tiny --num-seqs 4 \
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
  log "" "gpu-check: no step failed, but ${#not_run[@]} were not run or cut short in $took s:" \
    "$(IFS=';' && echo "${not_run[*]}")"
  exit 2
fi
if [ ${#skipped[@]} -gt 0 ]; then
  log "" "gpu-check: every step this machine could run passed in $took s; it could not run:" \
    "$(IFS=';' && echo "${skipped[*]}")"
else
  log "" "gpu-check: every step passed in $took s: $out/summary.md"
fi
