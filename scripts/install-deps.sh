#!/usr/bin/env bash
# Installs the Debian packages kvheap needs to build, test, benchmark, fuzz and document itself,
# and, where the CUDA toolkit (nvcc) is installed without them, NVIDIA's cuobjdump and nvdisasm
# from PyPI (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm, of nvcc's major version), which the
# KernelCode tests use to read the kernels' machine code. Idempotent: when everything is already
# present it changes nothing and says so.
set -euo pipefail

packages=(
  cmake ninja-build g++ make ccache
  libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev libopenblas-openmp-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev
  libpcre2-dev libutf8proc-dev pkg-config
  doxygen doxygen-awesome-css graphviz
  python3-matplotlib
  clang libclang-rt-14-dev libomp-dev clang-format clang-tidy clang-tools
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
else
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# cuobjdump and nvdisasm: the toolkit's own when it has them, else NVIDIA's PyPI packages, found
# where tests/kernels/check_attention_loop.py looks (the nvidia/cu<major>/bin folder of
# site-packages).
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc" ]; then
  major=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  need=()
  for tool in cuobjdump nvdisasm; do
    if ! command -v "$tool" >/dev/null && [ ! -x "$(dirname "$nvcc")/$tool" ] &&
      ! python3 -c "import glob, nvidia, sys; sys.exit(not any(glob.glob(p + '/cu*/bin/$tool')
                    for p in nvidia.__path__))" 2>/dev/null; then
      need+=("nvidia-cuda-$tool>=$major,<$((major + 1))")
    fi
  done
  if [ ${#need[@]} -eq 0 ]; then
    echo "install-deps: cuobjdump and nvdisasm already installed"
  else
    echo "install-deps: installing ${need[*]} from PyPI"
    python3 -m pip install --quiet --disable-pip-version-check "${need[@]}"
  fi
fi
