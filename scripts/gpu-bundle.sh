#!/usr/bin/env bash
# scripts/gpu-bundle.sh: packs, into .gpu-bundle/ (ignored by git), what scripts/gpu-check.sh needs
# on a GPU machine that has CUDA, CMake and a compiler but cannot reach a package mirror:
#
#   .gpu-bundle/debs/    the Debian packages of the build's libraries (headers, static and shared
#                        libraries, CMake package files), unpacked there under build/deps, never
#                        into the system
#   .gpu-bundle/models/  the test checkpoint and tokenizer (KVHEAP_MODELS_DIR, else ../shared/models)
#
# Run it on a Debian machine that can reach a mirror, then copy the checkout with .gpu-bundle/ in
# it to the GPU machine and run scripts/gpu-check.sh there. The packages are built for the packing
# machine's architecture, so pack on x86-64 for an x86-64 GPU host (an Arm one needs an Arm
# packer).
set -euo pipefail
cd "$(dirname "$0")/.."

bundle=.gpu-bundle
packages=(
  libeigen3-dev libcli11-dev nlohmann-json3-dev  # header-only
  libfmt-dev libfmt9                             # fmt and its shared library
  libgtest-dev libgmock-dev                      # GoogleTest (static libraries)
  libbenchmark-dev libbenchmark1debian           # Google Benchmark and its shared library
  libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2  # the tokenizers' regexes and NFC
)

# Into a fresh folder first, so that a failed download leaves the last bundle as it was.
fresh=$(mktemp -d "$bundle.new.XXXXXX") && chmod 755 "$fresh"  # apt downloads as its own user
trap 'rm -rf "$fresh"' EXIT
mkdir -p "$fresh/debs" "$fresh/models"
if ! (cd "$fresh/debs" && apt-get download "${packages[@]}" > /dev/null); then
  echo "gpu-bundle: apt-get download failed; run 'apt-get update' (as root) and try again" >&2
  exit 1
fi
# The test files only: any larger checkpoint kept beside them would not belong in the bundle.
models=${KVHEAP_MODELS_DIR:-../shared/models}
for f in stories260K.bin tokenizer.bin; do
  if [ -f "$models/$f" ]; then
    cp "$models/$f" "$fresh/models/"
  else
    echo "gpu-bundle: no $models/$f; the GPU run will skip the tests that need it" >&2
  fi
done
rm -rf "$bundle" && mv "$fresh" "$bundle"
echo "gpu-bundle: $(ls "$bundle/debs" | wc -l) packages and $(ls "$bundle/models" | wc -l) model files, $(du -sh "$bundle" | cut -f1) in $bundle/"
