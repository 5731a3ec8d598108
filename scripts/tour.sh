#!/usr/bin/env bash
# The tour: builds the five chapter programs (nothing else) and runs the ladder: one workload
# through chapters 1 to 5 in one KV budget, on the GPU where there is one (chapter 1 stays on the
# CPU), else on the CPU. Prints one table and writes it to docs/results/ladder-<cpu>.md, with its
# plots in docs/images/ (scripts/tour.py says how; another machine's file is kept).
#
#   scripts/tour.sh [--model NAME_OR_PATH] [--requests N] [--rate R] [--out FILE] [--no-peak]
#                   [--weight-dtype T] [--kv-dtype T] [--oracle-requests N]
#
# --model smollm2 runs the ladder on a real chat model, SmolLM2-135M-Instruct (fetched first with
# scripts/fetch-model.sh), serving real chat questions.
#
# On a GPU machine that cannot reach a package mirror, bring .gpu-bundle/ (scripts/gpu-bundle.sh
# packs it elsewhere): its libraries are used in place of the Debian packages.
set -euo pipefail
cd "$(dirname "$0")/.."

programs=(ch01_cpu_reference ch02_contiguous_gpu ch03_paged_blocks ch04_cow_prefix_sharing
  ch05_batched_scheduler)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
configure=()
if nvidia-smi -L >/dev/null 2>&1 && [ -x "$nvcc" ]; then
  preset=cuda-native device=cuda
  case ":$PATH:" in *":$(dirname "$nvcc"):"*) ;; *) export PATH="$PATH:$(dirname "$nvcc")" ;; esac
else
  preset=cpu device=cpu
fi
if [ "$device" = cuda ] && [ -d .gpu-bundle/debs ]; then
  # shellcheck source=scripts/gpu-bundle-env.sh
  . scripts/gpu-bundle-env.sh
  use_gpu_bundle || { echo "tour: $bundle_error" >&2; exit 1; }
  echo "tour: $bundle_note"
  # As scripts/gpu-check.sh configures on such a machine: no Doxygen there, nor perhaps Python's
  # test runner, and CMake 4 reads the bundle's older package files.
  configure=(-DKVHEAP_BUILD_DOCS=OFF -DKVHEAP_PYTHON_OPTIONAL=ON -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
else
  bash scripts/install-deps.sh
fi
cmake --preset "$preset" "${configure[@]}" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" --target "${programs[@]}"
# The plots need matplotlib, which Debian installs for its own python3; a python3 of another
# installation found first on PATH may lack it.
py=python3
if ! python3 -c "import matplotlib" 2>/dev/null && [ -x /usr/bin/python3 ]; then py=/usr/bin/python3; fi
# A model kvheap fetches by name is fetched first (once; the programs find it in the cache).
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
  if [ "${args[i]}" = --model ] && [ "${args[i + 1]}" = smollm2 ]; then
    bash scripts/fetch-model.sh smollm2 >/dev/null
  fi
done
"$py" scripts/tour.py --bin "build/$preset/bin" --device "$device" "$@"
