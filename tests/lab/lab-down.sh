#!/usr/bin/env bash
# Stop exactly what lab.sh started, by name and PID: the NFS VM of make demo, lab containers, loop
# devices it attached, and the dockerd it started (a Docker service already running is left alone).
source "$(dirname "$0")/lib.sh"
need_root

# The NFS VM and its storage namespace, when `nfs-vm.sh up` (make demo) started them.
if [ -e "$LAB_STATE/nfs-vm.up" ]; then
  bash "$LAB_DIR/nfs-vm.sh" down
fi

if [ -s "$LAB_STATE/containers" ] && docker info >/dev/null 2>&1; then
  sort -u "$LAB_STATE/containers" | while read -r name; do
    docker rm -f "$name" >/dev/null 2>&1 && log "removed container $name" || true
  done
fi
rm -f "$LAB_STATE/containers"

if [ -s "$LAB_STATE/networks" ] && docker info >/dev/null 2>&1; then
  sort -u "$LAB_STATE/networks" | while read -r network; do
    docker network rm "$network" >/dev/null 2>&1 && log "removed network $network" || true
  done
fi
rm -f "$LAB_STATE/networks"

# The shared bind mount of nodes.sh, and a slow FUSE source a test left mounted under it.
if [ -s "$LAB_STATE/mounts" ]; then
  sort -u "$LAB_STATE/mounts" | while read -r mountpoint; do
    for below in $(findmnt --list --noheadings --output TARGET | awk -v m="$mountpoint/" 'index($0, m) == 1' | sort -r); do
      umount -l "$below" && log "unmounted $below"
    done
    if findmnt --mountpoint "$mountpoint" >/dev/null; then
      umount -l "$mountpoint" && log "unmounted $mountpoint"
    fi
  done
fi
rm -f "$LAB_STATE/mounts"

if [ -s "$LAB_STATE/loops" ]; then
  sort -u "$LAB_STATE/loops" | while read -r loop backing; do
    # Detach only if the device still points at the file the lab attached.
    if losetup --list --noheadings --output NAME,BACK-FILE | grep -q "^$loop \+$backing\$"; then
      losetup -d "$loop" && log "detached $loop ($backing)"
    fi
  done
fi
rm -f "$LAB_STATE/loops"

if [ -s "$LAB_STATE/apt-cacher-ng.started" ]; then
  pid=$(cat "$LAB_STATE/apt-cacher-ng.started")
  if kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm)" = apt-cacher-ng ]; then
    kill "$pid" && log "stopped apt-cacher-ng (pid $pid; its cache stays in $APT_CACHE_DIR)"
  fi
  rm -f "$LAB_STATE/apt-cacher-ng.started"
fi

if [ -s "$LAB_STATE/dockerd.started" ]; then
  pid=$(cat "$LAB_STATE/dockerd.started")
  if kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm)" = dockerd ]; then
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    log "stopped dockerd (pid $pid)"
  fi
  rm -f "$LAB_STATE/dockerd.started"
fi
