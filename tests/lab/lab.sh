#!/usr/bin/env bash
# Bring the whole lab up (idempotent): Docker engine, images, wheelhouse, lab nodes.
source "$(dirname "$0")/lib.sh"
need_root
timed bash "$LAB_DIR/docker-up.sh"
timed bash "$LAB_DIR/apt-cache.sh"
timed bash "$LAB_DIR/images.sh"
timed bash "$LAB_DIR/wheelhouse.sh"
# CI brings the nodes up only after molecule: their loop disks and molecule's share 8 loop devices.
if [ "${DLTUNE_LAB_WITH_NODES:-1}" = 1 ]; then
  timed bash "$LAB_DIR/nodes.sh"
  log "lab is up: inventory/lab.yml reaches its nodes"
else
  log "lab base is up (engine, images, wheelhouse); no nodes started"
fi
