#!/usr/bin/env bash
# tests/tree/gpu_check/stand_ins.sh: scripts/gpu-check.sh end to end on a machine without a GPU,
# with stand-ins for nvidia-smi, nvcc, cmake, ctest, compute-sanitizer and the built programs (ninja
# and the C++ compiler are this machine's: the script builds and runs a small C++ program).
# Each scenario runs the script in a tree of its own and checks how it ends and what it ran:
#
#   good driver       R580 with CUDA 13, a bundle: every step ok, exit 0; the configure leaves
#                     Python optional, the build asks for gpu_check, ctest for -L device; the tests,
#                     end-to-end runs and sanitizers run with KVHEAP_CUDA_SYNC=1, the benchmarks
#                     and the ladder not; the ladder runs chapter 1 on the CPU, 2-5 on the device
#   CUDA 12, R550     passes the driver check (CUDA 12 needs only R525)
#   too-old driver    R550 with CUDA 13: exit 1 at once with the driver message, nothing built
#   no Python, CI     the configure is the real one (CMake on this project, Python hidden from it,
#                     CI=true), with the options gpu-check passes: it must succeed and leave the
#                     tour's tests out; the same configure without gpu-check's option must fail
#   bundle too new    a bundled library needing GLIBC_2.99, then one needing GLIBCXX_3.4.99: exit 1
#                     before the build, naming the version, the library and this machine's newest
#   old CMake, no nvcc  exit 1 at once, naming what is missing; a cap that is no number, exit 2
#   no ninja          the build is configured for make instead
#   no test matched   a sanitizer step whose test filter matches no test fails
#   near tie, ids differ  chapter 4's read-once run differs from the per-row run at a near tie
#                     (passes, named) or where the per-row run's top-2 gap is wide (fails)
#   a step's cap      a benchmark that outlives its cap is "cut short", the run exits 2
#   the budget        a ctest that outlives the budget is "cut short", the steps after it "not run"
#
# It takes about half a minute, most of it the real configure and the budget scenario's wait.
#
#   tests/tree/gpu_check/stand_ins.sh --with-build DIR
#
# instead runs the good scenario once with a real build's programs behind the stand-ins (DIR is a
# simulator build, e.g. build/sim, with the target gpu_check built): the device check, the tests,
# benchmarks, end-to-end runs and sanitizer commands are then the real programs with the real
# flags, on the CPU simulator. That takes minutes on two cores; it is not part of the suite. The
# Llama-3-8B-shaped end-to-end runs need about 12 GB of memory on a CPU: cap them short, e.g.
# GPU_CHECK_CAP_e2e_ch02=3 (GPU_CHECK_* variables pass through).
set -euo pipefail
src=$(cd "$(dirname "$0")/../../.." && pwd)
work=$(mktemp -d)
# STAND_INS_KEEP=1 keeps the scenarios' trees (each one's output.txt, calls.txt, out/) to look at.
if [ "${STAND_INS_KEEP:-0}" = 1 ]; then
  echo "stand-ins: the scenarios' trees are in $work"
else
  trap 'rm -rf "$work"' EXIT
fi
with_build=""
if [ "${1:-}" = --with-build ]; then
  with_build=$(realpath "${2:?usage: stand_ins.sh [--with-build BUILD_DIR]}")
fi
real_cmake=$(command -v cmake)
real_ctest=$(command -v ctest)
real_ninja=$(command -v ninja)
# The machine's own programs, as links in one folder, less the CUDA toolkit's and ninja: only the
# stand-ins may answer for the toolkit, and ninja is one of them so that a scenario can lack it.
host_path=$work/host-bin
mkdir -p "$host_path"
while read -r d; do
  [ -d "$d" ] || continue
  for f in "$d"/*; do
    n=${f##*/}
    case $n in nvcc | nvidia-smi | compute-sanitizer | ninja) continue ;; esac
    [ -x "$f" ] && [ ! -e "$host_path/$n" ] && ln -s "$f" "$host_path/$n"
  done
done < <(tr ':' '\n' <<< "$PATH")

# ---- the stand-ins ------------------------------------------------------------------------------
stand=$work/stand-ins
mkdir -p "$stand"
cat > "$stand/nvidia-smi" << 'EOF'
#!/usr/bin/env bash
# nvidia-smi: a GPU named $STANDIN_GPU on driver $STANDIN_DRIVER.
[ "${1:-}" = -L ] && echo "GPU 0: $STANDIN_GPU (UUID: GPU-stand-in)" && exit 0
fields="" header=1
for a in "$@"; do
  case $a in
    --query-gpu=*) fields=${a#--query-gpu=} ;;
    --format=*noheader*) header=0 ;;
  esac
done
[ -n "$fields" ] || { echo "stand-in nvidia-smi: $*"; exit 0; }
[ "$header" = 1 ] && echo "$fields"
IFS=, read -ra names <<< "$fields"
values=()
for n in "${names[@]}"; do
  case $n in
    name) values+=("$STANDIN_GPU") ;;
    driver_version) values+=("$STANDIN_DRIVER") ;;
    memory.total) values+=("143771 MiB") ;;
    *) values+=("1980 MHz") ;;
  esac
done
(IFS=, && echo "${values[*]}")
EOF
cat > "$stand/nvcc" << 'EOF'
#!/usr/bin/env bash
echo "Cuda compilation tools, release $STANDIN_CUDA, V$STANDIN_CUDA.88"
EOF
# cmake: logs every call; a configure is either nothing or, with STANDIN_REAL_CONFIGURE=1, the real
# CMake on the real project (CPU only: no GPU here for the native architecture) with every -D that
# gpu-check passed; a build makes the programs (stand-ins, or links to STANDIN_BUILD_DIR's).
cat > "$stand/cmake" << 'EOF'
#!/usr/bin/env bash
echo "cmake $*" >> "$STANDIN_LOG"
[ "${1:-}" = --version ] && echo "cmake version $STANDIN_CMAKE" && exit 0
if [ "${1:-}" = --build ]; then
  mkdir -p build
  if [ -n "${STANDIN_BUILD_DIR:-}" ]; then
    rm -rf build/cuda-native && ln -s "$STANDIN_BUILD_DIR" build/cuda-native
    exit 0
  fi
  for p in bin/ch01_cpu_reference bin/ch02_contiguous_gpu bin/ch03_paged_blocks \
    bin/ch04_cow_prefix_sharing bin/ch05_batched_scheduler \
    bench/bench_attention_gpu bench/bench_paged_attention_gpu bench/bench_shared_prefix_gpu \
    bench/bench_decode_gpu bench/bench_scheduler tests/test_decode_attention \
    tests/test_ch04_shared_gpu; do
    mkdir -p "build/cuda-native/$(dirname "$p")"
    cp "$STANDIN_PROGRAM" "build/cuda-native/$p"
  done
  exit 0
fi
if [ "${STANDIN_REAL_CONFIGURE:-0}" = 1 ]; then
  defs=()
  for a in "$@"; do [[ $a == -D* ]] && defs+=("$a"); done
  exec "$STANDIN_REAL_CMAKE" -S "$STANDIN_SRC" -B "$STANDIN_CONFIGURE_DIR" -G Ninja \
    -DKVHEAP_CUDA=off -DKVHEAP_BUILD_BENCH=OFF -DKVHEAP_PCH=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_Python3="$STANDIN_NO_PYTHON" "${defs[@]}"
fi
EOF
cat > "$stand/ctest" << 'EOF'
#!/usr/bin/env bash
echo "ctest KVHEAP_CUDA_SYNC=${KVHEAP_CUDA_SYNC:-unset} $*" >> "$STANDIN_LOG"
[ -n "${STANDIN_BUILD_DIR:-}" ] && exec "$STANDIN_REAL_CTEST" "$@"
sleep "${STANDIN_CTEST_SLEEP:-0}"
echo "100% tests passed, 0 tests failed out of 3"
EOF
cat > "$stand/compute-sanitizer" << 'EOF'
#!/usr/bin/env bash
# compute-sanitizer --tool TOOL --error-exitcode N COMMAND...: runs COMMAND and reports no error.
echo "compute-sanitizer KVHEAP_CUDA_SYNC=${KVHEAP_CUDA_SYNC:-unset} $*" >> "$STANDIN_LOG"
shift 4
"$@" || exit
echo "========= ERROR SUMMARY: 0 errors"
EOF
# A built program: logs its name, KVHEAP_CUDA_SYNC and arguments; STANDIN_SLEEP_<name> makes it
# outlive its cap.
cat > "$work/program" << 'EOF'
#!/usr/bin/env bash
name=$(basename "$0")
echo "$name KVHEAP_CUDA_SYNC=${KVHEAP_CUDA_SYNC:-unset} $*" >> "$STANDIN_LOG"
v=STANDIN_SLEEP_$name
sleep "${!v:-0}"
case "$name $*" in
  *--gtest_filter=*) echo "[==========] ${STANDIN_TESTS_RUN:-2} tests from 1 test suite ran." ;;
  # The ladder (scripts/tour.py): a run of the workload, every chapter alike, with what the tour
  # reads of it; before it, the model's shape.
  ch0[1-5]_*--workload*)
    echo '{"model_config": {"vocab_size": 128256, "max_seq_len": 8192, "kv_bytes_per_token": 16384},'
    echo ' "sequences": [{"generated_ids": [5, 6], "top2_gaps": [0.5, 0.5]}], "near_tie_gap": 0.01,'
    echo ' "metrics": {"kv_waste_fraction": 0.1, "device": "NVIDIA H200"},'
    echo ' "serving": {"peak_running": 4, "prefill_rows": 100, "decode_rows": 100, "passes": 50,'
    echo '  "kv_bytes_per_step": 1e6, "generated_tokens_per_s": 1000, "requests_per_s": 10,'
    echo '  "ttft_s": {"p50": 0.05, "p99": 0.1}, "seconds": 1, "gbps": 100, "peak_gbps": 4000,'
    echo '  "weight_bytes_per_step": 1e9, "preemptions": 0, "prefix_hit_rate": 0.5,'
    echo '  "matmul_gflops": 100, "peak_gflops": 0},'
    echo ' "timeline": {"seconds": [0, 1], "running": [1, 1], "kv_held_bytes": [1, 1],'
    echo '  "kv_cached_bytes": [0, 0], "kv_free_bytes": [0, 0]}}' ;;
  # Chapter 4 end to end: two samples' ids, the per-row run with its top-2 gaps;
  # STANDIN_READ_ONCE_IDS changes the read-once run's second sample.
  "ch04_cow_prefix_sharing"*--no-read-once*)
    echo '{"sequences": [{"generated_ids": [5, 6, 7], "top2_gaps": [0.5, 0.5, 0.5]},'
    echo ' {"generated_ids": [5, 6, 7], "top2_gaps": [0.5, 0.00001, 0.5]}], "near_tie_gap": 0.0001}' ;;
  "ch04_cow_prefix_sharing"*)
    echo '{"sequences": [{"generated_ids": [5, 6, 7]},'
    echo " {\"generated_ids\": [${STANDIN_READ_ONCE_IDS:-5, 6, 7}]}]}" ;;
  ch0[1-5]_*)
    echo '{"model_config": {"vocab_size": 128256, "max_seq_len": 8192, "kv_bytes_per_token": 16384}}' ;;
  *) echo '{"stand_in": true}' ;;
esac
EOF
ln -s "$real_ninja" "$stand/ninja"
chmod +x "$stand"/* "$work/program"

# ---- a bundle -----------------------------------------------------------------------------------
# make_deb DIR NAME SO...: DIR/NAME.deb holding each shared library SO under usr/lib/<arch>/, built
# with ar and tar as any Debian package is.
arch=$(uname -m)-linux-gnu
make_deb() {
  local dir=$1 name=$2 tmp
  shift 2
  tmp=$(mktemp -d "$work/deb.XXXXXX")
  mkdir -p "$tmp/root/usr/lib/$arch" "$tmp/control"
  cp "$@" "$tmp/root/usr/lib/$arch/"
  printf 'Package: %s\nVersion: 1\nArchitecture: all\nMaintainer: kvheap\nDescription: stand-in\n' \
    "$name" > "$tmp/control/control"
  echo 2.0 > "$tmp/debian-binary"
  tar -czf "$tmp/control.tar.gz" -C "$tmp/control" .
  tar -czf "$tmp/data.tar.gz" -C "$tmp/root" .
  (cd "$tmp" && ar rc "$dir/$name.deb" debian-binary control.tar.gz data.tar.gz)
}
# A library that needs only what this machine has, and two that need versions no runtime defines:
# each linked against a stub runtime (soname libc.so.6 or libstdc++.so.6) whose one symbol has the
# version given.
libs=$work/libs
mkdir -p "$libs"
echo 'int kvheap_ok(void) { return 1; }' > "$libs/ok.c"
cc -shared -fPIC -o "$libs/libok.so" "$libs/ok.c"
needy() {  # needy NAME SONAME VERSION
  local d=$libs/$1
  mkdir -p "$d"
  echo 'void kvheap_standin_symbol(void) {}' > "$d/stub.c"
  echo "$3 { global: kvheap_standin_symbol; local: *; };" > "$d/v.map"
  cc -shared -nostdlib -fPIC -Wl,-soname,"$2" -Wl,--version-script="$d/v.map" -o "$d/$2" "$d/stub.c"
  echo 'void kvheap_standin_symbol(void); void needy(void) { kvheap_standin_symbol(); }' > "$d/needy.c"
  cc -shared -nostdlib -fPIC -o "$libs/lib$1.so" "$d/needy.c" "$d/$2"
}
needy newglibc libc.so.6 GLIBC_2.99
needy newcxx libstdc++.so.6 GLIBCXX_3.4.99

# ---- running a scenario -------------------------------------------------------------------------
failures=0
# scenario NAME [VAR=VALUE...]: runs gpu-check in a tree of its own (work/NAME) with the stand-ins,
# less those named in $without, and VARs; leaves $rc, $log (gpu-check's stdout and stderr),
# $calls (what the stand-ins were asked) and $summary.
without=""
scenario() {
  name=$1
  shift
  local tree=$work/$name t
  mkdir -p "$tree/scripts" "$tree/bin"
  cp "$src/scripts/gpu-check.sh" "$src/scripts/gpu-bundle-env.sh" "$src/scripts/compare_ids.py" \
    "$src/scripts/kvheap_runs.py" "$src/scripts/make_workload.py" "$src/scripts/tour.py" \
    "$tree/scripts/"
  cp "$stand"/* "$tree/bin/"
  for t in $without; do rm "$tree/bin/$t"; done
  log=$tree/output.txt calls=$tree/calls.txt summary=$tree/out/summary.md
  failures_before=$failures
  : > "$calls"
  set +e
  env -i HOME="$HOME" PATH="$tree/bin:$host_path" CUDA_HOME=/nonexistent \
    GPU_CHECK_COMMIT=stand-in STANDIN_LOG="$calls" STANDIN_PROGRAM="$work/program" \
    STANDIN_GPU="NVIDIA H200" STANDIN_DRIVER=580.65.06 STANDIN_CUDA=13.0 STANDIN_CMAKE=3.25.1 \
    STANDIN_SRC="$src" STANDIN_REAL_CMAKE="$real_cmake" STANDIN_REAL_CTEST="$real_ctest" \
    STANDIN_CONFIGURE_DIR="$work/configure" STANDIN_NO_PYTHON=OFF "$@" \
    bash "$tree/scripts/gpu-check.sh" "$tree/out" > "$log" 2>&1
  rc=$?
  set -e
}
bundle() {  # bundle NAME LIB...: the scenario NAME gets a bundle holding LIBs
  mkdir -p "$work/$1/.gpu-bundle/debs"
  printf 'Stand-in Linux 99\narchitecture: %s\n' "$(uname -m)" > "$work/$1/.gpu-bundle/packed-on"
  local n=$1
  shift
  make_deb "$work/$n/.gpu-bundle/debs" "libs-$n" "$@"
}
fail() {
  echo "FAIL [$name]: $*"
  echo "---- gpu-check's output:"
  sed 's/^/    /' "$log"
  echo "---- what the stand-ins were asked:"
  sed 's/^/    /' "$calls"
  failures=$((failures + 1))
}
expect_rc() { [ "$rc" = "$1" ] || fail "exit status $rc, expected $1"; }
expect_output() { grep -qF -- "$1" "$log" || fail "no line containing: $1"; }
expect_call() { grep -qE -- "$1" "$calls" || fail "no stand-in call matching: $1"; }
expect_no_call() { ! grep -qE -- "$1" "$calls" || fail "a stand-in call matching: $1"; }
expect_summary() { grep -qF -- "$1" "$summary" || fail "summary.md has no line containing: $1"; }
passed() { [ "$failures" -gt "$failures_before" ] || echo "ok   [$name]"; }

if [ -n "$with_build" ]; then
  # GPU_CHECK_* (caps, budget) pass through: on a CPU the Llama-3-8B-shaped runs are best capped.
  mapfile -t passed_on < <(env | grep '^GPU_CHECK_' || true)
  scenario with-build STANDIN_BUILD_DIR="$with_build" KVHEAP_MODELS_DIR="${KVHEAP_MODELS_DIR:-}" \
    "${passed_on[@]}"
  cat "$log"
  exit "$rc"
fi

# ---- the scenarios ------------------------------------------------------------------------------
bundle good "$libs/libok.so"
scenario good
expect_rc 0
expect_output "gpu-check: libraries from .gpu-bundle (1 packages, packed on Stand-in Linux 99)"
expect_call "^cmake --preset cuda-native .*-DKVHEAP_PYTHON_OPTIONAL=ON"
expect_call "^cmake --build --preset cuda-native .*--target gpu_check"
expect_call "^ctest KVHEAP_CUDA_SYNC=1 .*-L device .*--no-tests=error"
expect_call "^ch02_contiguous_gpu KVHEAP_CUDA_SYNC=1 --model tiny"            # the device check
expect_call "^ch02_contiguous_gpu KVHEAP_CUDA_SYNC=1 --model llama-3-8b-4l"   # end to end
[ "$(grep -c '^ch04_cow_prefix_sharing KVHEAP_CUDA_SYNC=1 --model llama-3-8b-4l' "$calls")" = 2 ] ||
  fail "chapter 4's two end-to-end runs did not both run with KVHEAP_CUDA_SYNC=1"
for b in bench_attention_gpu bench_paged_attention_gpu bench_shared_prefix_gpu bench_decode_gpu \
  bench_scheduler; do
  expect_call "^$b KVHEAP_CUDA_SYNC=unset"  # timed without a wait after every launch
done
# The ladder: chapters 2-5 on the device, chapter 1 (the oracle) on the CPU, the table written.
for c in ch02_contiguous_gpu ch03_paged_blocks ch04_cow_prefix_sharing ch05_batched_scheduler; do
  expect_call "^$c KVHEAP_CUDA_SYNC=unset --model llama-3-8b-4l --workload .* --device cuda"
done
expect_call "^ch01_cpu_reference KVHEAP_CUDA_SYNC=unset --model llama-3-8b-4l --workload .* --device cpu"
grep -qF "| 05_batched_scheduler |" "$work/good/out/ladder-gpu.md" ||
  fail "the ladder's table has no row for chapter 5"
[ "$(grep -c '^compute-sanitizer KVHEAP_CUDA_SYNC=1' "$calls")" = 5 ] ||
  fail "not five sanitizer runs with KVHEAP_CUDA_SYNC=1"
[ "$(grep -c '| ok |' "$summary")" = 18 ] || fail "summary.md does not list 18 steps ok"
expect_output "compare_ids: 2 requests, 0 near ties, 0 differences"
expect_output "gpu-check: every step passed"
passed

scenario cuda12-r550 STANDIN_CUDA=12.4 STANDIN_DRIVER=550.54.15
expect_rc 0
expect_call "^cmake --build"
passed

scenario old-driver STANDIN_DRIVER=550.54.15
expect_rc 1
expect_output "gpu-check: the NVIDIA driver is 550.54.15, but CUDA 13.0 ($work/old-driver/bin/nvcc) needs driver R580 or newer: install driver R580 or newer, or put a CUDA 12 toolkit (which needs R525) first on PATH"
expect_no_call "^cmake (--preset|--build)"
expect_summary "**Stopped early:** the NVIDIA driver is 550.54.15"
passed

scenario no-python-ci CI=true STANDIN_REAL_CONFIGURE=1 STANDIN_NO_PYTHON=ON
expect_rc 0
grep -qF "no Python 3 interpreter: the tour's tests (Tour.*) are left out" \
  "$work/no-python-ci/out/build.log" || fail "build.log does not say the tour's tests are left out"
# The same configure without gpu-check's option fails under CI: the scenario above is a real one.
set +e
CI=true "$real_cmake" -S "$src" -B "$work/configure" -G Ninja -DKVHEAP_CUDA=off \
  -DKVHEAP_BUILD_BENCH=OFF -DKVHEAP_PCH=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Python3=ON \
  -DKVHEAP_PYTHON_OPTIONAL=OFF > "$work/configure.txt" 2>&1
plain_rc=$?
set -e
[ "$plain_rc" -ne 0 ] && grep -qF "no Python 3 interpreter, which CI needs" "$work/configure.txt" ||
  fail "without KVHEAP_PYTHON_OPTIONAL the configure under CI did not fail on the missing Python"
passed

bundle new-glibc "$libs/libnewglibc.so"
scenario new-glibc
expect_rc 1
expect_output "gpu-check: the bundled libraries need GLIBC_2.99 (libnewglibc.so) from libc.so.6, but this machine's /"
expect_output "libc.so.6 provides only up to GLIBC_2."
expect_output "The bundle was packed on Stand-in Linux 99; pack it (scripts/gpu-bundle.sh) on a distribution no newer than this machine's"
expect_no_call "^cmake (--preset|--build)"
passed

bundle new-libstdcxx "$libs/libnewcxx.so"
scenario new-libstdcxx
expect_rc 1
expect_output "gpu-check: the bundled libraries need GLIBCXX_3.4.99 (libnewcxx.so) from libstdc++.so.6, but this machine's /"
expect_output "libstdc++.so.6 provides only up to GLIBCXX_3.4."
expect_no_call "^cmake (--preset|--build)"
passed

scenario old-cmake STANDIN_CMAKE=3.22.1
expect_rc 1
expect_output "gpu-check: cmake 3.22.1 is too old: the presets (CMakePresets.json, version 6) need CMake 3.25 or newer"
expect_no_call "^cmake (--preset|--build)"
passed

without=nvcc
scenario no-nvcc
without=""
expect_rc 1
expect_output "gpu-check: no nvcc (the CUDA toolkit) on PATH or in /nonexistent/bin: install the CUDA toolkit, 12.0 or newer"
expect_no_call "^cmake"
passed

without=ninja
scenario no-ninja
without=""
expect_rc 0
expect_output "gpu-check: no ninja on PATH: building with make instead"
expect_call "^cmake --preset cuda-native -G Unix Makefiles "
passed

scenario no-test-matched STANDIN_TESTS_RUN=0
expect_rc 1
expect_output "gpu-check: racecheck ran no test: its --gtest_filter matches none in this build"
expect_summary "| 6b. compute-sanitizer racecheck (decode attention) | **FAILED** (exit 1) |"
passed

scenario bad-cap GPU_CHECK_CAP_build=soon
expect_rc 2
expect_output "gpu-check: GPU_CHECK_CAP_build must be a whole number of seconds, not 'soon'"
expect_no_call "."
passed

scenario step-cap GPU_CHECK_CAP_bench_attention_gpu=2 STANDIN_SLEEP_bench_attention_gpu=30
expect_rc 2
expect_summary "| 4. benchmark bench_attention_gpu | **cut short** at its 2 s cap |"
grep -q "FAILED" "$summary" && fail "a step was reported FAILED"
expect_call "^bench_paged_attention_gpu"  # the steps after it still ran
passed

# Chapter 4's two runs: a sample that differs where the per-row run's top-2 gap is a near tie
# passes and is named; one that differs where the gap is wide fails the step.
scenario near-tie "STANDIN_READ_ONCE_IDS=5, 9, 7"
expect_rc 0
expect_output "request 1 token 1 is 9 where"
expect_output "a near tie (top-2 gap 1e-05 < 0.0001)"
passed

scenario ids-differ "STANDIN_READ_ONCE_IDS=5, 6, 8"
expect_rc 1
expect_output "request 1 token 2 is 8 where"
expect_summary "| 5. chapter 4: read once gives the per-row run's ids, up to near ties | **FAILED** (exit 1) |"
passed

# 20 s: the up-front checks (a C++ compile) may take several seconds on a loaded machine, and
# ctest must still find at least 5 s of budget to start.
scenario budget GPU_CHECK_BUDGET_S=20 STANDIN_CTEST_SLEEP=60
expect_rc 2
expect_summary "| 3. the tests that reach the device (ctest -L device) | **cut short**: the 20 s budget ran out |"
expect_summary "| 4. benchmark bench_attention_gpu | **not run**: the time budget was spent |"
grep -q "FAILED" "$summary" && fail "a step was reported FAILED"
passed

if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "every scenario ended as expected"
