#!/usr/bin/env bash
# Bring the whole lab up (idempotent): Docker engine, images, wheelhouse, lab nodes.
source "$(dirname "$0")/lib.sh"
need_root
timed bash "$LAB_DIR/docker-up.sh"
timed bash "$LAB_DIR/apt-cache.sh"
timed bash "$LAB_DIR/images.sh"
timed bash "$LAB_DIR/wheelhouse.sh"
# tests/lab/slowfs.py, the lab's slow shared filesystem, loads libfuse (2 or 3) through ctypes.
if ! ldconfig -p | grep -q 'libfuse3\?\.so\.'; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfuse3-3 >/dev/null
fi
# CI brings the nodes up only after molecule: their loop disks and molecule's share 8 loop devices.
if [ "${DLTUNE_LAB_WITH_NODES:-1}" = 1 ]; then
  timed bash "$LAB_DIR/nodes.sh"
  log "lab is up: inventory/lab.yml reaches its nodes"
else
  log "lab base is up (engine, images, wheelhouse); no nodes started"
fi
