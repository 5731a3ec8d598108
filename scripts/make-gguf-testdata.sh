#!/usr/bin/env bash
# Writes tests/data/gguf/ (the GGUF oracles) with llama.cpp and its gguf package.
#
#   scripts/make-gguf-testdata.sh
#
# Builds llama.cpp's Python binding from its source distribution (llama-cpp-python vendors
# llama.cpp; about 10 minutes on 2 cores) and the gguf package in a virtual environment, once,
# then runs scripts/make_gguf_testdata.py on SmolLM2-135M-Instruct.Q4_1.gguf and tokenizer.bin
# from $KVHEAP_MODELS_DIR (default ../shared/models). Run it by hand when the cases change; the
# tests read what it wrote and need neither llama.cpp nor Python packages. The virtual
# environment is $KVHEAP_LLAMA_CPP_VENV (default ~/.cache/kvheap/llama-cpp-venv);
# scripts/compare_llama_cpp.py uses it too.
set -euo pipefail
cd "$(dirname "$0")/.."
models=${KVHEAP_MODELS_DIR:-../shared/models}
venv=${KVHEAP_LLAMA_CPP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kvheap/llama-cpp-venv}
if ! "$venv/bin/python" -c "import llama_cpp, gguf, jinja2, numpy" 2>/dev/null; then
  python3 -m venv "$venv"
  CMAKE_ARGS="-DLLAMA_CURL=OFF -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$venv/bin/pip" install --no-binary llama-cpp-python llama-cpp-python==0.3.36 gguf==0.19.0 \
    numpy jinja2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" scripts/make_gguf_testdata.py --model "$models/SmolLM2-135M-Instruct.Q4_1.gguf" \
  --tokenizer-bin "$models/tokenizer.bin" --out tests/data/gguf --work "$work"
