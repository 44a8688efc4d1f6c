#!/bin/sh
# attach-loop.sh IMAGE: attach IMAGE to a free loop device and print the device's path.
# Run inside a privileged lab container. Its /dev is a copy taken when it started, so a loop device the
# kernel makes later (losetup asks /dev/loop-control for a free one and gets a new one when every
# existing one is busy) has no node there and `losetup --find --show` fails with "No such file or
# directory". Make the missing node from the kernel's numbers in sysfs, then attach; retry if another
# process took the device in between.
set -eu
image=${1:?usage: attach-loop.sh IMAGE}
[ -f "$image" ] || { echo "attach-loop: $image is not a file" >&2; exit 2; }
attempt=0
while [ "$attempt" -lt 5 ]; do
  attempt=$((attempt + 1))
  device=$(losetup --find)
  if [ ! -b "$device" ]; then
    numbers=$(cat "/sys/block/${device#/dev/}/dev")
    mknod -m 0660 "$device" b "${numbers%:*}" "${numbers#*:}"
  fi
  if losetup "$device" "$image"; then
    echo "$device"
    exit 0
  fi
done
echo "attach-loop: could not attach $image to a free loop device after $attempt tries" >&2
exit 1
