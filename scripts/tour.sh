#!/usr/bin/env bash
# The tour: builds every chapter, runs each on the built-in default model, and prints the
# comparison table (also written to docs/results/tour-<cpu>.md, or a name of this machine's own
# where another machine wrote that one).
#
#   scripts/tour.sh [--model NAME_OR_PATH] [--max-new-tokens N] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$(nproc)"
python3 scripts/tour.py --bin build/cpu/bin "$@"
