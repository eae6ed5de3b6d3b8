#!/usr/bin/env bash
# Checks the Debian package as a new user on a plain Debian 12 would meet it: debootstraps a
# minimal bookworm into a folder, installs build-deb/kolo_*.deb there with apt (which must fetch
# every library it declares), and runs the installed kolorun with 2 ranks of examples/consumer,
# built here against the package's files. Needs root, network access to the Debian archive and
# a package from scripts/package-deb.sh. Not part of the test suite: it downloads ~150 MB.
# Usage: scripts/check-deb.sh [chroot-dir]   (default: /tmp/kolo-deb12)
set -euo pipefail
cd "$(dirname "$0")/.."
root="${1:-/tmp/kolo-deb12}"
deb=$(ls build-deb/kolo_*.deb | head -n 1)
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
[[ -x $root/usr/bin/apt-get ]] || debootstrap --variant=minbase bookworm "$root" \
  http://deb.debian.org/debian >/dev/null

# The consumer, built against the package's own files (unpacked beside it).
stage=$(mktemp -d)
trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$stage"' EXIT
dpkg-deb -x "$deb" "$stage/pkg"
cmake -S examples/consumer -B "$stage/consumer" -DCMAKE_PREFIX_PATH="$stage/pkg/usr" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$stage/consumer" >/dev/null

# pkg-config's files find the package's headers and libraries wherever it is unpacked.
pc_dir=$(dirname "$(find "$stage/pkg" -name kolo.pc)")
pc_flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs kolo-framework)
for flag in $pc_flags; do
  case $flag in
    -I* | -L*)
      dir=$(realpath -m "${flag:2}")
      [[ -d $dir && $dir == "$stage/pkg/usr/"* ]] ||
        { echo "check-deb: pkg-config names $dir, not a folder of the package" >&2; exit 1; } ;;
  esac
done

cp "$deb" "$root/tmp/"
cp "$stage/consumer/consumer" "$root/tmp/consumer"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
chroot "$root" apt-get update -qq
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "/tmp/$(basename "$deb")"
chroot "$root" dpkg -s kolo | grep -E '^(Version|Depends|Recommends):'
chroot "$root" kolorun --print-config | head -n 3
chroot "$root" kolorun -np 2 /tmp/consumer --steps 100
echo "check-deb: $(basename "$deb") installs and runs on a plain Debian 12"
