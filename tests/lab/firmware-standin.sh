#!/bin/sh
# firmware-standin.sh — install an empty stand-in for Ubuntu's linux-firmware in a lab container.
# linux-image-generic depends on linux-firmware: 316 MB to download, 1.1 GB to unpack and firmware
# copied into every initramfs build, for blobs a container never loads. The kernel, its modules and
# initramfs-tools stay real; only the firmware package is replaced, at a version the archive never
# upgrades (epoch 99).
set -eu
if dpkg-query -W -f '${Version}' linux-firmware 2>/dev/null | grep -q '^99:'; then
  echo "stand-in already installed"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/pkg/DEBIAN"
cat >"$work/pkg/DEBIAN/control" <<'CONTROL'
Package: linux-firmware
Version: 99:0-dltune.lab
Architecture: all
Maintainer: dltune lab <lab@dltune.invalid>
Description: empty stand-in for linux-firmware in dltune lab containers
 A container never loads firmware; the real package costs 1.1 GB unpacked.
CONTROL
dpkg-deb --build "$work/pkg" "$work/linux-firmware.deb" >/dev/null
dpkg -i "$work/linux-firmware.deb" >/dev/null
echo "stand-in installed"
