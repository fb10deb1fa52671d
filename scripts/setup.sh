#!/usr/bin/env bash
# Installs what hypic needs to build and test, if missing (Debian 12 packages). Idempotent.
# As root it runs apt-get; otherwise it prints the exact command to run and exits 1.
# Takes: seconds when everything is installed, a few minutes of apt-get otherwise.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools
  libcli11-dev libtrilinos-kokkos-dev libopenblas-dev nlohmann-json3-dev libgtest-dev libpcre2-dev
)
# Extra packages a later part of the suite needs (kept in one list so setup stays one step).
PACKAGES+=(${HYPIC_EXTRA_PACKAGES:-})

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run as root:  $cmd" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
