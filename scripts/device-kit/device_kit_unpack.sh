#!/usr/bin/env bash
# Unpacks scripts/device-kit/device_kit.sh's archive into ROOT (default /), adding only files that are not
# there (nothing of the machine is replaced), then runs ldconfig there. Decompresses with xz,
# else Python's lzma (a machine may have python3 but not xz). Used by scripts/device_check.sh
# and scripts/device-kit/device_kit_check.sh.
# Takes: under a minute.
#
# Usage: scripts/device-kit/device_kit_unpack.sh KIT [ROOT]
set -euo pipefail
KIT=$1
ROOT=${2:-/}
if command -v xz >/dev/null; then
  xz -dc "$KIT"
else
  python3 -c "import lzma, shutil, sys
shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)" "$KIT"
fi | tar -x --skip-old-files -C "$ROOT"
ldconfig -r "$ROOT"
