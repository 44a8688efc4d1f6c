#!/usr/bin/env bash
# The scale lab (issue 47): N lightweight nodes (sshd + python3 + dltune, no systemd) as Docker
# containers on a bridge network of their own, reached by Ansible over real SSH with host keys checked.
#
#   scale-lab.sh up N        start nodes 1..N (idempotent: running nodes are kept, extra ones removed)
#   scale-lab.sh down        remove exactly what `up` made: containers and network (by label), the
#                            blackhole guard route, the temporary keys and inventory
#   scale-lab.sh hang K      make the last K nodes hung: TCP connections are accepted, nothing answers
#   scale-lab.sh unhang      undo `hang`
#   scale-lab.sh memory      memory per node (cgroup of each container, and its containerd shim)
#
# Everything lives under SCALE_STATE; the inventory is $SCALE_STATE/inventory.yml.
# shellcheck source=tests/lab/lib.sh
source "$(dirname "$0")/../lab/lib.sh"
need_root
SCALE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SCALE_STATE="${DLTUNE_SCALE_STATE:-/var/tmp/dltune-scale}"
SCALE_IMAGE="${DLTUNE_SCALE_IMAGE:-dltune-scale/node:22.04}"
SCALE_BASE_IMAGE="${DLTUNE_SCALE_BASE_IMAGE:-$LAB_IMAGE_REPO:22.04}"
SCALE_NETWORK="${DLTUNE_SCALE_NETWORK:-dltune-scale}"
# RFC 2544's benchmarking range, a /24 of it: up to 250 nodes. Never used outside this machine.
SCALE_SUBNET="${DLTUNE_SCALE_SUBNET:-198.19.47.0/24}"
# The guard is a blackhole route for the same subnet at a metric of its own: while the bridge exists,
# its connected route (metric 0) wins and the nodes are reachable; once it is gone (or if a node were
# started elsewhere), packets for the subnet die here instead of leaving the machine.
SCALE_GUARD_METRIC=4747
LABEL=org.dltune.scale
# Parallel `docker run`/`docker exec`: 2 CPUs, and dockerd itself is the bottleneck beyond a few.
SCALE_JOBS="${DLTUNE_SCALE_JOBS:-4}"

node_name() { printf 'scale-node-%03d' "$1"; }
# Node i gets .(10+i): .1 is the bridge (gateway), a few low addresses stay free.
node_ip() { echo "${SCALE_SUBNET%.*/*}.$((10 + $1))"; }

ensure_image() {
  local context="$SCALE_STATE/image-context" hash current
  compgen -G "$BUILD_DIR/wheelhouse/dltune-*.whl" >/dev/null \
    || die "no dltune wheel in $BUILD_DIR/wheelhouse: run make wheelhouse first"
  docker image inspect "$SCALE_BASE_IMAGE" >/dev/null 2>&1 || timed bash "$LAB_DIR/images.sh" 22.04
  local fake_nvml="$BUILD_DIR/fakenvml/libnvidia-ml.so.1"
  if [ ! -s "$fake_nvml" ]; then
    mkdir -p "$(dirname "$fake_nvml")"
    gcc -shared -fPIC -O2 -Wall -Werror -o "$fake_nvml" "$REPO_ROOT/tests/fakenvml/fake_nvml.c"
  fi
  rm -rf "$context"
  mkdir -p "$context"
  cp -r "$SCALE_DIR/image/." "$context/"
  cp -r "$BUILD_DIR/wheelhouse" "$context/wheelhouse"
  cp "$fake_nvml" "$context/libnvidia-ml.so.1"
  cp "$REPO_ROOT/tests/fixtures/nvml/lab_node.conf" "$context/nvml-scenario.conf"
  # Inputs: the build context (files and names) and the base image's id.
  hash=$( (cd "$context" && find . -type f -print0 | sort -z | xargs -0 sha256sum
    docker image inspect -f '{{.Id}}' "$SCALE_BASE_IMAGE") | sha256sum | cut -c1-16)
  current=$(docker image inspect -f "{{ index .Config.Labels \"$LABEL.inputs\" }}" "$SCALE_IMAGE" 2>/dev/null || true)
  if [ "$current" = "$hash" ]; then
    log "image $SCALE_IMAGE is up to date ($hash)"
  else
    log "building $SCALE_IMAGE from $SCALE_BASE_IMAGE ($hash)"
    DOCKER_BUILDKIT=0 docker build --quiet --build-arg BASE_IMAGE="$SCALE_BASE_IMAGE" \
      --label "$LABEL.inputs=$hash" -t "$SCALE_IMAGE" "$context" >/dev/null
  fi
  rm -rf "$context"
}

ensure_guard_and_network() {
  # Refuse a subnet something else on this machine already routes (another lab, a real network).
  if ip route show "$SCALE_SUBNET" | grep -v "metric $SCALE_GUARD_METRIC" | grep -qv "^$SCALE_SUBNET dev br-"; then
    die "$SCALE_SUBNET is already routed here ($(ip route show "$SCALE_SUBNET" | head -1)): set DLTUNE_SCALE_SUBNET"
  fi
  # The guard goes in before the network and its containers exist, and is recorded for `down`.
  ip route replace blackhole "$SCALE_SUBNET" metric "$SCALE_GUARD_METRIC"
  echo "$SCALE_SUBNET $SCALE_GUARD_METRIC" > "$SCALE_STATE/guard"
  if ! docker network inspect "$SCALE_NETWORK" >/dev/null 2>&1; then
    # --internal: Docker drops anything from the subnet to outside it (no NAT, no forwarding out),
    # the controller on this host still reaches the nodes through the bridge.
    docker network create --internal --subnet "$SCALE_SUBNET" --gateway "${SCALE_SUBNET%.*/*}.1" \
      --label "$LABEL=network" "$SCALE_NETWORK" >/dev/null
    log "network $SCALE_NETWORK ($SCALE_SUBNET, internal)"
  fi
}

ensure_keys() {
  mkdir -p "$SCALE_STATE/keys"
  chmod 0700 "$SCALE_STATE/keys"
  [ -s "$SCALE_STATE/keys/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C dltune-scale-controller \
    -f "$SCALE_STATE/keys/id_ed25519"
  install -m 0644 "$SCALE_STATE/keys/id_ed25519.pub" "$SCALE_STATE/keys/authorized_keys"
}

start_node() {
  local i=$1 name ip state
  name=$(node_name "$i")
  ip=$(node_ip "$i")
  state=$(docker inspect -f '{{.State.Status}}' "$name" 2>/dev/null || true)
  [ "$state" = running ] && return 0
  [ -n "$state" ] && docker rm -f "$name" >/dev/null
  # --init: docker-init reaps what sshd leaves; no privileges, no systemd, 64 pids are plenty.
  docker run -d --init --name "$name" --hostname "$name" --network "$SCALE_NETWORK" --ip "$ip" \
    --pids-limit 256 --label "$LABEL=node" \
    --mount "type=bind,source=$SCALE_STATE/keys/authorized_keys,target=/root/.ssh/authorized_keys,readonly" \
    "$SCALE_IMAGE" >/dev/null
}

# The host key through the out-of-band channel (docker exec), never from the network: a known_hosts
# line per node, by address (what ssh looks up), for StrictHostKeyChecking=yes.
host_key_line() {
  local i=$1 name key
  name=$(node_name "$i")
  key=$(docker exec "$name" sh -c 'for _ in $(seq 1 100); do [ -s /etc/ssh/ssh_host_ed25519_key.pub ] && break; sleep 0.1; done; cat /etc/ssh/ssh_host_ed25519_key.pub')
  [ -n "$key" ] || die "node $name has no host key"
  echo "$(node_ip "$i") ${key% *}"
}

write_inventory() {
  local n=$1 inventory="$SCALE_STATE/inventory.yml" i
  {
    echo "# Generated by tests/scale/scale-lab.sh for $n nodes: groups as examples/inventory."
    echo "all:"
    echo "  vars:"
    echo "    ansible_user: root"
    echo "    ansible_python_interpreter: /usr/bin/python3"
    echo "    ansible_ssh_private_key_file: $SCALE_STATE/keys/id_ed25519"
    # Host keys checked against the keys collected out of band; ssh_args (ControlPersist) stays free
    # for the ansible.cfg under test.
    echo "    ansible_ssh_common_args: >-"
    echo "      -o StrictHostKeyChecking=yes -o UserKnownHostsFile=$SCALE_STATE/known_hosts"
    echo "      -o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes"
    echo "  children:"
    echo "    gpu_nodes:"
    echo "      hosts:"
    for i in $(seq 1 "$n"); do
      echo "        $(node_name "$i"): {ansible_host: $(node_ip "$i")}"
    done
    echo "    slurm:"
    echo "      children:"
    echo "        gpu_nodes:"
    # No real driver to manage on a container: the nvidia_driver play skips every node.
    echo "    nvidia_driver_excluded:"
    echo "      children:"
    echo "        gpu_nodes:"
  } > "$inventory.partial"
  mv "$inventory.partial" "$inventory"
}

wait_for_ssh() {
  local n=$1 i ip pending
  for _ in $(seq 1 120); do
    pending=0
    for i in $(seq 1 "$n"); do
      ip=$(node_ip "$i")
      # The banner, not only the TCP handshake: sshd really answers.
      timeout 2 bash -c "exec 3<>/dev/tcp/$ip/22 && head -c 4 <&3" 2>/dev/null | grep -q SSH || pending=$((pending + 1))
    done
    [ "$pending" = 0 ] && return 0
    sleep 1
  done
  die "$pending node(s) did not answer on port 22"
}

memory_report() {
  local ids count total_usage=0 total_rss=0 shim_kb=0 id usage rss
  ids=$(docker ps -q --no-trunc --filter "label=$LABEL=node")
  count=$(echo "$ids" | grep -c . || true)
  [ "$count" -gt 0 ] || { log "no scale-lab node running"; return 0; }
  for id in $ids; do
    # cgroup v1 (this machine) or v2: usage includes page cache, rss is the processes' own memory.
    if [ -r "/sys/fs/cgroup/memory/docker/$id/memory.usage_in_bytes" ]; then
      usage=$(cat "/sys/fs/cgroup/memory/docker/$id/memory.usage_in_bytes")
      rss=$(awk '$1 == "total_rss" {print $2}' "/sys/fs/cgroup/memory/docker/$id/memory.stat")
    else
      usage=$(cat "/sys/fs/cgroup/system.slice/docker-$id.scope/memory.current" 2>/dev/null || echo 0)
      rss=$(awk '$1 == "anon" {print $2}' "/sys/fs/cgroup/system.slice/docker-$id.scope/memory.stat" 2>/dev/null || echo 0)
    fi
    total_usage=$((total_usage + usage))
    total_rss=$((total_rss + rss))
    # Each container has a containerd shim on the host: part of what a node costs this machine.
    shim_kb=$((shim_kb + $(ps -o rss= -p "$(pgrep -f -- "-id $id" | head -1)" 2>/dev/null || echo 0)))
  done
  awk -v n="$count" -v u="$total_usage" -v r="$total_rss" -v s="$shim_kb" 'BEGIN {
    printf "nodes %d: per node cgroup usage %.1f MiB (rss %.1f MiB), containerd shim rss %.1f MiB; total %.0f MiB\n",
      n, u / n / 1048576, r / n / 1048576, s / n / 1024, (u + s * 1024) / 1048576 }'
}

cmd_up() {
  local n=${1:?usage: scale-lab.sh up N} i
  if [ "$n" -lt 1 ] || [ "$n" -gt 240 ]; then die "N must be 1..240 (the /24's addresses)"; fi
  mkdir -p "$SCALE_STATE"
  bash "$LAB_DIR/docker-up.sh"
  timed ensure_image
  ensure_guard_and_network
  ensure_keys
  # Nodes beyond N from an earlier, bigger lab go (by label and name, never another's container).
  docker ps -a --filter "label=$LABEL=node" --format '{{.Names}}' | while read -r name; do
    if [ "$((10#${name#scale-node-}))" -gt "$n" ]; then
      docker rm -f "$name" >/dev/null
      log "removed $name"
    fi
  done
  export -f start_node node_name node_ip
  export SCALE_NETWORK SCALE_SUBNET SCALE_IMAGE SCALE_STATE LABEL
  timed bash -c "seq 1 $n | xargs -P $SCALE_JOBS -I{} bash -c 'start_node {}'"
  export -f host_key_line log die
  timed bash -c "seq 1 $n | xargs -P $SCALE_JOBS -I{} bash -c 'host_key_line {}'" > "$SCALE_STATE/known_hosts.partial"
  [ "$(wc -l < "$SCALE_STATE/known_hosts.partial")" = "$n" ] || die "host keys collected for fewer than $n nodes"
  mv "$SCALE_STATE/known_hosts.partial" "$SCALE_STATE/known_hosts"
  write_inventory "$n"
  timed wait_for_ssh "$n"
  rm -f "$SCALE_STATE/hung"
  log "$n nodes up; inventory $SCALE_STATE/inventory.yml"
  memory_report
}

cmd_down() {
  if docker info >/dev/null 2>&1; then
    local containers networks
    containers=$(docker ps -aq --filter "label=$LABEL=node")
    if [ -n "$containers" ]; then
      # A paused container is unpaused first so that its processes get the kill.
      docker ps -q --filter "label=$LABEL=node" --filter status=paused | xargs -r docker unpause >/dev/null
      # Kill, then remove in batches of 20: one `docker rm -f` of 200 containers left stale endpoints
      # in Docker 20.10's network store (the network then refuses removal until dockerd restarts).
      echo "$containers" | xargs docker kill >/dev/null 2>&1 || true
      echo "$containers" | xargs -n 20 docker rm -f >/dev/null
      log "removed $(echo "$containers" | wc -l) node(s)"
    fi
    networks=$(docker network ls -q --filter "label=$LABEL=network")
    if [ -n "$networks" ]; then
      # Docker releases the endpoints of removed containers asynchronously: retry for a while.
      for _ in $(seq 1 30); do
        echo "$networks" | xargs docker network rm >/dev/null 2>&1 && break
        sleep 1
      done
      # The guard stays as long as the network does: stop here, before removing it.
      [ -z "$(docker network ls -q --filter "label=$LABEL=network")" ] \
        || die "network $SCALE_NETWORK still has endpoints (stale in dockerd's store; a dockerd restart clears them); guard route kept: run down again"
      log "removed network $SCALE_NETWORK"
    fi
  fi
  if [ -s "$SCALE_STATE/guard" ]; then
    read -r subnet metric < "$SCALE_STATE/guard"
    ip route del blackhole "$subnet" metric "$metric" 2>/dev/null && log "removed guard route $subnet"
    rm -f "$SCALE_STATE/guard"
  fi
  # The temporary keys, known_hosts and inventory: a new lab makes new ones. The image stays (reuse).
  rm -rf "$SCALE_STATE/keys" "$SCALE_STATE/known_hosts" "$SCALE_STATE/inventory.yml" "$SCALE_STATE/hung" \
    "$SCALE_STATE/image-context"
  rmdir "$SCALE_STATE" 2>/dev/null || true
}

# `docker pause` freezes every process of the container (cgroup freezer) while its network namespace
# lives on: the kernel still completes the TCP handshake on port 22 (the listen backlog), but sshd never
# sends its banner. That is a hung node as Ansible meets it: connect succeeds, then nothing.
cmd_hang() {
  local k=${1:?usage: scale-lab.sh hang K} names
  names=$(docker ps --filter "label=$LABEL=node" --filter status=running --format '{{.Names}}' | sort | tail -n "$k")
  [ -n "$names" ] || die "no running scale-lab node"
  echo "$names" | xargs docker pause >/dev/null
  echo "$names" >> "$SCALE_STATE/hung"
  log "hung: $(echo "$names" | paste -sd' ')"
  echo "$names"
}

cmd_unhang() {
  docker ps -q --filter "label=$LABEL=node" --filter status=paused | xargs -r docker unpause >/dev/null
  rm -f "$SCALE_STATE/hung"
}

case "${1:-}" in
  up) cmd_up "${2:-}" ;;
  down) cmd_down ;;
  hang) cmd_hang "${2:-}" ;;
  unhang) cmd_unhang ;;
  memory) memory_report ;;
  *) die "usage: scale-lab.sh up N | down | hang K | unhang | memory" ;;
esac
