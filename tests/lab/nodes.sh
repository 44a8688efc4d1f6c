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
for node in $LAB_NODES; do
  for _ in $(seq 1 60); do
    state=$(docker exec "$node" systemctl is-system-running 2>/dev/null || true)
    case "$state" in running|degraded) break ;; esac
    sleep 0.5
  done
  log "node $node: systemd $state"
done
