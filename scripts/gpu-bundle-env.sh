# Sourced, not run: sets up the libraries of .gpu-bundle/ (scripts/gpu-bundle.sh packs it) for a
# build on a machine that cannot reach a package mirror, as a GPU machine often cannot.
# scripts/gpu-check.sh and scripts/tour.sh use it from the repository root:
#
#   . scripts/gpu-bundle-env.sh
#   use_gpu_bundle [PROBE] || { echo "$bundle_error" >&2; exit 1; }
#
# use_gpu_bundle unpacks every package under build/deps (never into /) and exports
# CMAKE_PREFIX_PATH, LD_LIBRARY_PATH, PKG_CONFIG_PATH and PKG_CONFIG_SYSROOT_DIR so that CMake and
# the programs find them there. PROBE, a C++ program built on this machine, names the C and C++
# runtimes its programs load: every symbol version the bundled shared libraries need from them
# must be there, or every test program would fail to start during the build, far from the cause.
# On failure it returns 1 with the reason in bundle_error; on success bundle_note says what was
# used and bundle_packed_on where it was packed.

# provided LIB: the symbol versions LIB defines (GLIBC_2.34, GLIBCXX_3.4.30, ...), one a line.
provided() { objdump -p "$1" 2> /dev/null | awk '/^Version definitions:/ {d = 1; next} /^Version References:/ {d = 0} d && NF >= 4 {print $4}'; }
# needed FILE: "SONAME VERSION" for every symbol version FILE needs from another library.
needed() { objdump -p "$1" 2> /dev/null | awk '/^Version References:/ {r = 1; next} r && /required from/ {lib = $3; sub(/:$/, "", lib); next} r && NF >= 4 {print lib, $4}'; }

# unpack DEB DIR: a Debian package's files under DIR, with dpkg-deb or, where there is none (a
# GPU image need not be Debian's), with ar and tar.
unpack_deb() {
  if command -v dpkg-deb > /dev/null; then
    dpkg-deb -x "$1" "$2"
    return
  fi
  local deb data tmp rc
  deb=$(realpath "$1")
  data=$(ar t "$deb" | grep -m1 '^data\.tar') || return 1
  tmp=$(mktemp -d) || return 1
  (cd "$tmp" && ar x "$deb" "$data") && tar -xf "$tmp/$data" -C "$2"
  rc=$?
  rm -rf "$tmp"
  return "$rc"
}

use_gpu_bundle() {
  local probe=${1:-} bundle_arch deps arch d runtimes soname path have missing family newest
  bundle_error=""
  bundle_packed_on=$(head -1 .gpu-bundle/packed-on 2> /dev/null || echo "an unrecorded distribution")
  bundle_arch=$(sed -n 's/^architecture: //p' .gpu-bundle/packed-on 2> /dev/null)
  if [ -n "$bundle_arch" ] && [ "$bundle_arch" != "$(uname -m)" ]; then
    bundle_error="the bundle holds $bundle_arch libraries, but this machine is $(uname -m): pack it with scripts/gpu-bundle.sh on a $(uname -m) machine"
    return 1
  fi
  # Unpacked under build/deps, and found through the standard search variables: CMake finds the
  # packages' config files under lib/<arch>/cmake only with a Debian-style compiler, so that
  # folder is named as a prefix too.
  deps=$(pwd)/build/deps
  arch=$(uname -m)-linux-gnu
  if ! { rm -rf "$deps" && mkdir -p "$deps"; }; then
    bundle_error="could not make $deps"
    return 1
  fi
  for d in .gpu-bundle/debs/*.deb; do
    if ! unpack_deb "$d" "$deps"; then
      bundle_error="could not unpack $d (no dpkg-deb, and ar or tar failed)"
      return 1
    fi
  done
  if [ -n "$probe" ] && command -v objdump > /dev/null; then
    runtimes=$(LD_TRACE_LOADED_OBJECTS=1 "$probe" 2> /dev/null |
      awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
    while read -r soname path; do
      [ -n "$soname" ] || continue
      have=$(provided "$path")
      missing=$(find "$deps" -name '*.so*' -type f | while read -r lib; do
        needed "$lib" | awk -v s="$soname" '$1 == s {print $2}' | while read -r v; do
          grep -qxF "$v" <<< "$have" || echo "$v ($(basename "$lib"))"
        done
      done | sort -uV)
      if [ -n "$missing" ]; then
        family=$(head -1 <<< "$missing")
        family=${family%%_*}  # GLIBC, GLIBCXX, CXXABI or GCC: the newest of that family is quoted
        newest=$(grep -E "^${family}_[0-9]" <<< "$have" | sort -V | tail -1)
        bundle_error="the bundled libraries need $(echo "$missing" | paste -sd, - | sed 's/,/, /g') from $soname, but this machine's $path provides only up to ${newest:-none}. The bundle was packed on $bundle_packed_on; pack it (scripts/gpu-bundle.sh) on a distribution no newer than this machine's, or install the libraries here (scripts/install-deps.sh) and leave .gpu-bundle out"
        return 1
      fi
    done <<< "$runtimes"
  fi
  export CMAKE_PREFIX_PATH="$deps/usr:$deps/usr/lib/$arch/cmake${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$deps/usr/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # PCRE2 and utf8proc are found through pkg-config, whose files say /usr: the sysroot moves them
  # to the unpacked copy, which the search path puts first.
  export PKG_CONFIG_PATH="$deps/usr/lib/$arch/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export PKG_CONFIG_SYSROOT_DIR="$deps"
  bundle_note="libraries from .gpu-bundle ($(find .gpu-bundle/debs -name '*.deb' | wc -l) packages, packed on $bundle_packed_on)"
  [ -n "$probe" ] && ! command -v objdump > /dev/null &&
    bundle_note="$bundle_note; no objdump (binutils): their glibc and libstdc++ needs were not checked"
  return 0
}
