#!/usr/bin/env bash
# The tour: builds every chapter, runs each on the built-in default model, and prints the
# comparison table (also written to docs/results/<device>.md).
#
#   scripts/tour.sh [--model NAME_OR_PATH] [--max-new-tokens N]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "$(nproc)"
python3 scripts/tour.py --bin build/cpu/bin "$@"
