#!/bin/bash
# detach-loops.sh DIR: unmount and detach every loop device whose backing file is a file in DIR.
# Run inside the lab container that made the files. Loop devices are host-global, so each is matched by
# its backing file's inode and device (a path alone could be another container's file of the same
# name), whether or not the scenario got as far as recording it.
set -euo pipefail
dir=${1:?usage: detach-loops.sh DIR}
[ -d "$dir" ] || exit 0
declare -A ours=()
while IFS= read -r -d '' file; do
  read -r inode dev < <(stat -c '%i %d' "$file")
  # st_dev as the kernel encodes it (new_encode_dev), as losetup prints it: MAJOR:MINOR.
  major=$(( (dev >> 8) & 0xfff | ((dev >> 32) & ~0xfff) ))
  minor=$(( (dev & 0xff) | ((dev >> 12) & ~0xff) ))
  ours["$inode $major:$minor"]=1
done < <(find "$dir" -maxdepth 1 -type f -print0)
losetup --list --noheadings --output NAME,BACK-INO,BACK-MAJ:MIN | while read -r device inode numbers; do
  [ -n "${ours["$inode $numbers"]:-}" ] || continue
  umount --all-targets "$device" 2>/dev/null || true
  losetup --detach "$device" && echo "detached $device"
done
