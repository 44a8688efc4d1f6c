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
# Prometheus and node_exporter (Debian's packages): promtool lints dltune's textfile and unit-tests the
# alert rules; the server and the exporter run them on real series in a network namespace of the test's
# own (tests/integration/test_prometheus_live.py). policy-rc.d keeps the packages' own services from
# starting on this machine where a service manager runs.
if ! command -v promtool >/dev/null || ! command -v prometheus-node-exporter >/dev/null; then
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
  fi
  monitoring=(prometheus prometheus-node-exporter)
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${monitoring[@]}" >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${monitoring[@]}" >/dev/null; }
  [ "$made_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
fi
# CI brings the nodes up only after molecule: their loop disks and molecule's share 8 loop devices.
if [ "${DLTUNE_LAB_WITH_NODES:-1}" = 1 ]; then
  timed bash "$LAB_DIR/nodes.sh"
  log "lab is up: inventory/lab.yml reaches its nodes"
else
  log "lab base is up (engine, images, wheelhouse); no nodes started"
fi
