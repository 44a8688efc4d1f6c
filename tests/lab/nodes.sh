#!/usr/bin/env bash
# Lab nodes: privileged Ubuntu containers with systemd as PID 1, standing in for GPU nodes.
# Reached by Ansible through the Docker connection (inventory/lab.yml). Idempotent: a running
# node is kept; each container started is recorded for lab-down.sh.
source "$(dirname "$0")/lib.sh"
need_root
LAB_NODES="${DLTUNE_LAB_NODES:-dltune-lab-node1 dltune-lab-node2}"
LAB_NODE_RELEASE="${DLTUNE_LAB_NODE_RELEASE:-22.04}"

for node in $LAB_NODES; do
  state=$(docker inspect -f '{{.State.Status}}' "$node" 2>/dev/null || true)
  if [ "$state" = running ]; then
    log "node $node is running"
    continue
  fi
  [ -n "$state" ] && docker rm -f "$node" >/dev/null
  docker run -d --name "$node" --hostname "$node" --privileged \
    --tmpfs /run --tmpfs /run/lock --stop-signal SIGRTMIN+3 \
    --label org.dltune.lab=node "$LAB_IMAGE_REPO:$LAB_NODE_RELEASE" >/dev/null
  echo "$node" >> "$LAB_STATE/containers"
  log "started node $node ($LAB_NODE_RELEASE)"
done
# GPU-node stand-ins: the fake NVML library (tests/fakenvml) and a healthy 4-GPU scenario, so the
# audit's driver and gpu areas run their real pynvml path on the lab nodes (labelled as fake).
fake_nvml="$BUILD_DIR/fakenvml/libnvidia-ml.so.1"
mkdir -p "$(dirname "$fake_nvml")"
gcc -shared -fPIC -O2 -Wall -Werror -o "$fake_nvml" "$REPO_ROOT/tests/fakenvml/fake_nvml.c"
for node in $LAB_NODES; do
  docker exec "$node" mkdir -p /etc/dltune-lab
  docker cp "$REPO_ROOT/tests/fixtures/nvml/lab_node.conf" "$node:/etc/dltune-lab/nvml-scenario.conf"
  docker cp "$fake_nvml" "$node:/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
  docker exec "$node" ldconfig
done

for node in $LAB_NODES; do
  for _ in $(seq 1 60); do
    state=$(docker exec "$node" systemctl is-system-running 2>/dev/null || true)
    case "$state" in running|degraded) break ;; esac
    sleep 0.5
  done
  log "node $node: systemd $state"
done
