#!/usr/bin/env bash
# scripts/gpu-bundle.sh: packs, into .gpu-bundle/ (ignored by git), what scripts/gpu-check.sh needs
# on a GPU machine that has CUDA, CMake, Ninja and a compiler but cannot reach a package mirror:
#
#   .gpu-bundle/debs/       the packages of the build's libraries (headers, static and shared
#                           libraries, CMake package files), unpacked there under build/deps,
#                           never into the system
#   .gpu-bundle/models/     the test checkpoint and tokenizer (KVHEAP_MODELS_DIR, else
#                           ../shared/models)
#   .gpu-bundle/packed-on   the distribution, architecture and glibc it was packed with, and the
#                           packages
#
# Run it on a Debian or Ubuntu machine (apt) that can reach a mirror, of the GPU machine's
# architecture and no newer than its distribution: the shared libraries need the packer's glibc
# and libstdc++ symbol versions, and scripts/gpu-check.sh checks that the GPU machine has them
# before it builds anything. The development packages have the same names on every Debian and
# Ubuntu release; the shared libraries they depend on do not (libfmt9 on Debian 12, libfmt10 on
# Debian 13, libfmt8 on Ubuntu 22.04), so those are asked of the packing machine's apt.
set -euo pipefail
cd "$(dirname "$0")/.."

bundle=.gpu-bundle
dev_packages=(
  libeigen3-dev libcli11-dev nlohmann-json3-dev  # header-only
  libfmt-dev                                     # fmt: headers and a shared library
  libgtest-dev libgmock-dev                      # GoogleTest (static libraries)
  libbenchmark-dev                               # Google Benchmark: headers and a shared library
  libpcre2-dev libutf8proc-dev                   # the tokenizers' regexes and NFC
)
if ! command -v apt-get > /dev/null || ! command -v apt-cache > /dev/null; then
  echo "gpu-bundle: no apt-get here: the bundle is made of Debian packages, so pack it on Debian or Ubuntu" >&2
  exit 1
fi
distro=$( (. /etc/os-release 2> /dev/null && echo "${PRETTY_NAME:-$ID $VERSION_ID}") || echo "unknown distribution")

# The shared-library packages each development package depends on, named as this distribution
# names them (a library package's name ends in its soname's version: libfmt9, libbenchmark1debian).
runtime_packages=()
for dev in libfmt-dev libbenchmark-dev libpcre2-dev libutf8proc-dev; do
  deps=$(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$dev" 2> /dev/null | sed -n 's/^  Depends: \(lib[^ <>]*[0-9][^ <>]*\)$/\1/p')
  if [ -z "$deps" ]; then
    echo "gpu-bundle: apt knows no shared library that $dev depends on in $distro; run" \
      "'apt-get update' (as root) and try again" >&2
    exit 1
  fi
  mapfile -t found <<< "$deps"
  runtime_packages+=("${found[@]}")
done
packages=("${dev_packages[@]}" "${runtime_packages[@]}")
echo "gpu-bundle: packing for $distro, $(uname -m): ${packages[*]}"

# Into a fresh folder first, so that a failed download leaves the last bundle as it was.
fresh=$(mktemp -d "$bundle.new.XXXXXX") && chmod 755 "$fresh"  # apt downloads as its own user
trap 'rm -rf "$fresh"' EXIT
mkdir -p "$fresh/debs" "$fresh/models"
if ! (cd "$fresh/debs" && apt-get download "${packages[@]}" > /dev/null); then
  echo "gpu-bundle: apt-get download failed; run 'apt-get update' (as root) and try again" >&2
  exit 1
fi
{
  echo "$distro"
  echo "architecture: $(uname -m)"
  echo "glibc: $(getconf GNU_LIBC_VERSION 2> /dev/null | awk '{print $2}')"
  echo "packages: ${packages[*]}"
} > "$fresh/packed-on"
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
