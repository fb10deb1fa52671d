#!/usr/bin/env bash
# Packs what hypic needs to build and run besides a compiler, CMake and CUDA (Open MPI, parallel
# HDF5, Kokkos, OpenBLAS, CLI11, nlohmann-json, PCRE2, GoogleTest, pkg-config, and every library
# they load) from this Debian 12 machine's installed packages into one archive, for a GPU
# machine that has CUDA but none of these and cannot download them (the lent H200's image:
# docs/testing.md, "The GPU check on a machine without hypic's libraries").
# scripts/device_check.sh unpacks it there when it finds it, adding only files that are not there
# yet.
# Takes: about 4 minutes on 2 cores.
#
# Usage: scripts/device-kit/device_kit.sh [OUT]   (default .devkit/hypic-device-kit.tar.xz; .devkit/ is
#        ignored by git, so carry it explicitly). Runs scripts/setup.sh's packages as installed:
#        run scripts/setup.sh first. Takes about 4 minutes on 2 cores; about 21 MB.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-.devkit/hypic-device-kit.tar.xz}
mkdir -p "$(dirname "$OUT")"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The packages hypic builds against, and the runtime files Open MPI and OpenBLAS select through
# Debian's alternatives.
SEED=(libopenmpi-dev openmpi-bin openmpi-common libopenmpi3 libpmix2 libhdf5-openmpi-dev
  libhdf5-openmpi-103-1 libhdf5-openmpi-hl-100 libcli11-dev libtrilinos-kokkos-dev
  libtrilinos-kokkos-13.2
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 nlohmann-json3-dev
  libgtest-dev googletest libpcre2-dev libpcre2-8-0 pkgconf pkgconf-bin libpkgconf3 pkg-config
  libssl-dev libcurl4-openssl-dev libaec-dev zlib1g-dev)  # the last four: HDF5's link line
# What any machine with a C++ compiler has (and must keep its own of).
BASE=" libc6 libc6-dev libstdc++6 libgcc-s1 libgomp1 zlib1g libstdc++-12-dev libgcc-12-dev
  gcc-12-base linux-libc-dev libcrypt1 libcrypt-dev "

for p in "${SEED[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || {
    echo "device_kit: package $p is not installed; run scripts/setup.sh first" >&2
    exit 1
  }
done

# Closure over shared-library dependencies: every package whose library an ELF file of an
# included package loads (Open MPI's plugins included), outside BASE.
declare -A have owner
# OWNER = the package of a library file (dpkg -S is slow: each path is asked once).
owner_of() {
  local lib=$1 q
  if [[ -z ${owner[$lib]+x} ]]; then
    q=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -1 | cut -d: -f1 || true)
    [[ -n $q ]] || q=$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1 || true)
    owner[$lib]=$q
  fi
  OWNER=${owner[$lib]}
}
queue=("${SEED[@]}")
while ((${#queue[@]})); do
  p=${queue[0]}
  queue=("${queue[@]:1}")
  if [[ -n ${have[$p]:-} || $BASE == *" $p "* ]]; then continue; fi
  have[$p]=1
  while read -r f; do
    [[ -f $f && ! -L $f ]] || continue
    case $f in *.so* | */bin/*) ;; *) continue ;; esac
    head -c 4 "$f" | grep -q 'ELF' || continue
    for lib in $(ldd "$f" 2>/dev/null | awk '/=> \//{print $3}'); do
      owner_of "$lib"
      if [[ -n $OWNER && -z ${have[$OWNER]:-} ]]; then queue+=("$OWNER"); fi
    done
  done < <(dpkg -L "$p")
done
printf '%s\n' "${!have[@]}" | sort >"$WORK/packages"
echo "device_kit: $(wc -l <"$WORK/packages") packages"

# Their files, without documentation, LAPACK, Fortran bindings and static libraries (hypic links
# none of them), except HDF5's two (CMake's FindHDF5 first checks that h5pcc links a test
# program, and h5pcc links statically unless told otherwise) and GoogleTest's (Debian ships no
# shared one).
xargs -a "$WORK/packages" dpkg -L | sort -u | while read -r f; do
  if [[ -f $f || -L $f ]]; then echo "$f"; fi
done | grep -v -E '^/usr/share/(doc|man|lintian|locale|info|bug)/|liblapack|liboshmem|\.mod$' |
  grep -v -E '^/(bin|sbin|lib|lib32|lib64|libx32)$' |  # merged /usr's links: the machine's own
  grep -v -E '/usr/include/.*fortran|/usr/share/openmpi/.*fort|mpifh|usempi|hdf5.*_?fortran' \
    >"$WORK/listed"
{
  grep -v -E '\.a$' "$WORK/listed"
  grep -E '/libhdf5(_openmpi)?(_hl)?\.a$|/libgtest(_main)?\.a$' "$WORK/listed"
} >"$WORK/files"

# Debian's alternatives (mpicc, mpirun, libopenblas.so.0, cblas.h, mpi.pc, ...): the links that
# lead to a packed file.
find /usr /etc/alternatives -type l 2>/dev/null | while read -r l; do
  [[ $l == /etc/alternatives/* || $(readlink "$l") == /etc/alternatives/* ]] || continue
  r=$(readlink -f "$l")
  if grep -qxF "$r" "$WORK/files"; then echo "$l"; fi
done >"$WORK/links"
cat "$WORK/files" "$WORK/links" | sort -u >"$WORK/all"
echo "device_kit: $(wc -l <"$WORK/all") files and links; compressing"
XZ_OPT=-9e tar -cJf "$OUT" --no-recursion -T "$WORK/all" 2>/dev/null
printf '%s\n' "${!have[@]}" | sort | tr '\n' ' ' | fold -s -w 96 | sed 's/^/  /'; echo
echo "device_kit: wrote $OUT ($(du -h "$OUT" | cut -f1)); carry .devkit to the GPU machine and run" \
  "scripts/device_check.sh there"
