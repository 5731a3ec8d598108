#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds, runs every test and builds the docs.
#
#   scripts/test.sh            everything CI runs
#
# KVHEAP_MODELS_DIR points the tests at a folder holding stories260K.bin and tokenizer.bin; tests
# that need them skip without it (and fail instead when CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
jobs=$(nproc)

step() { printf '\n== %s ==\n' "$*"; }

step "CPU build and tests (preset cpu)"
cmake --preset cpu
cmake --build --preset cpu -j "$jobs"
ctest --preset cpu -j "$jobs"

step "docs (Doxygen, warnings are errors)"
cmake --build --preset cpu --target docs

step "all tests passed"
