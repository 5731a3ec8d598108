#!/usr/bin/env bash
# Builds the libFuzzer programs (preset "fuzz", clang) and runs each one for a while on a scratch
# copy of its seed corpus, so the committed seeds under fuzz/corpus/ stay as they are.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]      default 60; exits 1 when any target finds a crash
#
# Targets run side by side, as many at once as there are cores (KVHEAP_JOBS overrides it).
#
# A crash leaves its input in build/fuzz/findings/<target>/ (crash-*, leak-*, timeout-*, oom-*).
# To run one target longer, or to replay one input, call its program directly, e.g.
#   build/fuzz/fuzz/fuzz_safetensors -max_total_time=3600 build/fuzz/corpus/fuzz_safetensors
#   build/fuzz/fuzz/fuzz_safetensors path/to/crash-input
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (a positive integer; default 60)" >&2
  exit 2
fi
targets=(fuzz_llama2c_loader fuzz_safetensors fuzz_tokenizer fuzz_cli fuzz_block_pool fuzz_shared_blocks
  fuzz_scheduler fuzz_workload fuzz_tokenizer_json fuzz_tiktoken fuzz_bpe_encode fuzz_gguf)
jobs="${KVHEAP_JOBS:-$(nproc)}"

bash scripts/install-deps.sh
cmake --preset fuzz
# Only the fuzz programs: the chapter programs are built without CUDA in scripts/test.sh step 4.
cmake --build --preset fuzz -j "$jobs" --target "${targets[@]}"

# run_target T: fuzz one target on a scratch copy of its corpus; the log is build/fuzz/T.log.
run_target() {
  local t="$1"
  # Work on a copy: libFuzzer adds every input that reaches new coverage to the corpus folder.
  local work="build/fuzz/corpus/$t" findings="build/fuzz/findings/$t"
  mkdir -p "$work" "$findings"
  cp -n "fuzz/corpus/$t"/* "$work"/ 2>/dev/null || true
  # Past findings start the run as well: the fuzz build's sanitizers check them again.
  cp -n "fuzz/regressions/$t"/* "$work"/ 2>/dev/null || true
  local dict=()
  if [ -f "fuzz/dict/$t.dict" ]; then dict=("-dict=fuzz/dict/$t.dict"); fi
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: an input that makes kvheap allocate
  # gigabytes is a finding too (a header that was trusted). Leaks are reported at exit.
  "build/fuzz/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings/" "${dict[@]}" "$work" \
    > "build/fuzz/$t.log" 2>&1
}

# Each fuzzer runs on one core, so as many run at once as there are jobs: on two cores the twelve
# targets take six rounds instead of twelve. Their reports follow in the targets' order.
printf '\n== %s targets, %s s each, %s at a time ==\n' "${#targets[@]}" "$seconds" "$jobs"
declare -A pid_of
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_target "$t" &
  pid_of[$t]=$!
  running=$((running + 1))
done

failed=()
for t in "${targets[@]}"; do
  printf '\n== %s ==\n' "$t"
  if ! wait "${pid_of[$t]}"; then
    failed+=("$t")
    tail -n 40 "build/fuzz/$t.log"
  fi
  grep -E '^#[0-9]+.*(DONE|pulse|REDUCE|NEW)' "build/fuzz/$t.log" | tail -n 1 || true
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "build/fuzz/$t.log" || true
done

if [ ${#failed[@]} -ne 0 ]; then
  printf '\nfuzz: findings in %s; inputs are under build/fuzz/findings/\n' "${failed[*]}" >&2
  exit 1
fi
printf '\nfuzz: no findings in %s s per target\n' "$seconds"
