#!/usr/bin/env bash
# Installs the Debian packages kvheap needs to build, test, benchmark, fuzz and document itself.
# Idempotent: when every package is already present it changes nothing and says so.
set -euo pipefail

packages=(
  cmake ninja-build g++ make
  libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev
  libpcre2-dev libutf8proc-dev pkg-config
  doxygen doxygen-awesome-css graphviz
  python3-matplotlib
  clang libclang-rt-14-dev libomp-dev clang-format clang-tidy
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
