#!/usr/bin/env bash
# Checks scripts/device-kit/device_kit.sh's archive on a machine that has none of hypic's libraries,
# without a GPU: a Debian 12 chroot with only a compiler, make, CMake, `file` and Python
# (`debootstrap --variant=minbase bookworm`), this machine's CUDA bound in read-only when it has
# one, and NCCL from the nvidia-nccl Python package when that is installed here. In it: unpack
# the kit (scripts/device-kit/device_kit_unpack.sh, through Python's lzma: minbase has no xz), configure
# (with CUDA when bound in), build hypic and hypic_mpi_tests, then `hypic info`, a warm-up
# into an HDF5 store with `inspect --verify`, and the MPI tests at 2 ranks. Prints PASS or FAIL
# per step; exit status 0 only when all passed. docs/testing.md, "The GPU check on a machine
# without hypic's libraries".
# Takes: about 10 minutes on the idle 2-core VM (debootstrap, a build in the chroot).
#
# Usage: scripts/device-kit/device_kit_check.sh   (as root, with network for debootstrap; after
#        scripts/device-kit/device_kit.sh). About 10 minutes on the idle 2-core VM.
# Environment: HYPIC_DEVICE_KIT [.devkit/hypic-device-kit.tar.xz], HYPIC_KIT_CHECK_DIR
#        [/tmp/hypic-kit-check] (removed at the start and, unless HYPIC_KIT_CHECK_KEEP=1, at
#        the end).
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=${HYPIC_DEVICE_KIT:-.devkit/hypic-device-kit.tar.xz}
DIR=${HYPIC_KIT_CHECK_DIR:-/tmp/hypic-kit-check}
[[ -f $KIT ]] || {
  echo "device_kit_check: no $KIT; make it with scripts/device-kit/device_kit.sh" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || {
  echo "device_kit_check: needs root (debootstrap, chroot, bind mounts)" >&2
  exit 1
}

# shellcheck disable=SC2317  # called through the EXIT trap
unmount_all() {  # deepest first; the chroot is removed only when nothing is mounted in it
  { findmnt -rn -o TARGET | grep "^$DIR/" || true; } | sort -r | while read -r m; do
    umount "$m" || umount -l "$m"
  done
}
# shellcheck disable=SC2317  # called through the EXIT trap
cleanup() {
  unmount_all
  if [[ ${HYPIC_KIT_CHECK_KEEP:-0} != 1 ]] && ! findmnt -rn -o TARGET | grep -q "^$DIR/"; then
    rm -rf "$DIR"
  fi
}
unmount_all
rm -rf "$DIR"
trap cleanup EXIT

command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
echo "device_kit_check: debootstrap (minbase bookworm) into $DIR"
debootstrap --variant=minbase bookworm "$DIR" http://deb.debian.org/debian >"$DIR.debootstrap.log" 2>&1 || {
  echo "device_kit_check: FAIL: debootstrap (see $DIR.debootstrap.log)" >&2
  exit 1
}
cp /etc/resolv.conf "$DIR/etc/"
chroot "$DIR" bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
  --no-install-recommends g++ make cmake file python3-minimal libpython3.11-stdlib >/dev/null'
for m in proc dev dev/shm sys; do mount --bind "/$m" "$DIR/$m"; done

mkdir -p "$DIR/src/.devkit"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$DIR/src"
cp "$KIT" "$DIR/src/.devkit/kit.tar.xz"

cfg=(-DCMAKE_BUILD_TYPE=Release -DHYPIC_CUDA=OFF)
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  mkdir -p "$DIR/usr/local/cuda"
  mount --bind -o ro "$(readlink -f /usr/local/cuda)" "$DIR/usr/local/cuda"
  cfg=(-DCMAKE_BUILD_TYPE=Release -DHYPIC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  if [[ -n $nccl && -e $nccl/include/nccl.h ]]; then
    mkdir -p "$DIR/nccl"
    cp -r "$nccl/include" "$nccl/lib" "$DIR/nccl/"
    lib=$(find "$DIR/nccl/lib" -maxdepth 1 -name 'libnccl.so*' | sort | head -1)
    cfg+=(-DHYPIC_NCCL_INCLUDE=/nccl/include -DHYPIC_NCCL_LIB="${lib#"$DIR"}")
  fi
fi

failed=0
run() {  # name, then the command to run in the chroot (in /src)
  local name=$1 t
  shift
  t=$(date +%s)
  if chroot "$DIR" env OMPI_MCA_plm_rsh_agent=false OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 bash -c "cd /src && $*" >"$DIR.$name.log" 2>&1; then
    echo "device_kit_check: PASS $name ($(($(date +%s) - t)) s)"
  else
    echo "device_kit_check: FAIL $name ($(($(date +%s) - t)) s; see $DIR.$name.log)"
    tail -n 20 "$DIR.$name.log"
    failed=1
  fi
}
run no-libraries '! command -v mpicc && ! command -v xz && [ ! -e /usr/include/trilinos ]'
run unpack 'bash scripts/device-kit/device_kit_unpack.sh .devkit/kit.tar.xz'
run configure "cmake -S . -B build ${cfg[*]}"
grep -E '^--   ' "$DIR.configure.log" || true
if [[ $failed -eq 0 ]]; then
  run build "cmake --build build -j $(nproc) --target hypic hypic_mpi_tests"
fi
if [[ $failed -eq 0 ]]; then
  run info 'build/src/hypic info'
  run store 'head -n 5 inputs/corpus/synthqa.jsonl >/tmp/c.jsonl &&
    build/src/hypic warmup --model inputs/models/qwen3_5-synthqa --corpus /tmp/c.jsonl \
      --store /tmp/s.h5 --threads 1 && build/src/hypic inspect --store /tmp/s.h5 --verify'
  run mpi-2-ranks "mpirun -n 2 --oversubscribe build/tests/hypic_mpi_tests \
    --gtest_filter='Distributed.*:ClusterWorld.*'"
fi
[[ $failed -eq 0 ]] && echo "device_kit_check: PASS" || echo "device_kit_check: FAIL"
exit $failed
