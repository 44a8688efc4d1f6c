#!/usr/bin/env bash
# Bring the whole lab up (idempotent): Docker engine, images, wheelhouse, lab nodes.
source "$(dirname "$0")/lib.sh"
need_root
timed bash "$LAB_DIR/docker-up.sh"
timed bash "$LAB_DIR/images.sh"
timed bash "$LAB_DIR/wheelhouse.sh"
timed bash "$LAB_DIR/nodes.sh"
log "lab is up: inventory/lab.yml reaches its nodes"
