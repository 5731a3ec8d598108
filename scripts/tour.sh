#!/usr/bin/env bash
# The tour: builds the five chapter programs (nothing else) and runs the ladder: one workload
# through chapters 1 to 5 in one KV budget, on the GPU where there is one (chapter 1 stays on the
# CPU), else on the CPU. Prints one table and writes it to docs/results/ladder-<cpu>.md, with its
# plots in docs/images/ (scripts/tour.py says how; another machine's file is kept).
#
#   scripts/tour.sh [--model NAME_OR_PATH] [--requests N] [--rate R] [--out FILE] [--no-peak]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
programs=(ch01_cpu_reference ch02_contiguous_gpu ch03_paged_blocks ch04_cow_prefix_sharing
  ch05_batched_scheduler)
if nvidia-smi -L >/dev/null 2>&1 && { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  preset=cuda-native device=cuda
else
  preset=cpu device=cpu
fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" --target "${programs[@]}"
# The plots need matplotlib, which Debian installs for its own python3; a python3 of another
# installation found first on PATH may lack it.
py=python3
if ! python3 -c "import matplotlib" 2>/dev/null && [ -x /usr/bin/python3 ]; then py=/usr/bin/python3; fi
"$py" scripts/tour.py --bin "build/$preset/bin" --device "$device" "$@"
