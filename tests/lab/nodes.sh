#!/usr/bin/env bash
# Lab nodes: privileged Ubuntu containers with systemd as PID 1, standing in for GPU nodes.
# Reached by Ansible through the Docker connection (inventory/lab.yml). Idempotent: a running
# node is kept; each container started is recorded for lab-down.sh.
source "$(dirname "$0")/lib.sh"
need_root
LAB_NODES="${DLTUNE_LAB_NODES:-dltune-lab-node1 dltune-lab-node2 dltune-lab-node3}"
# The Slurm controller (slurmctld), a container of its own as on a cluster: no GPU, no data disk.
LAB_CONTROLLER="${DLTUNE_LAB_CONTROLLER:-dltune-lab-slurmctl}"
# Slurm nodes of one cluster (tests/lab/slurm.sh): one Ubuntu release, the image with Slurm baked in.
LAB_NODE_IMAGE="${DLTUNE_LAB_NODE_IMAGE:-$LAB_IMAGE_REPO-slurm:22.04}"
# A network of the lab's own: Docker's DNS resolves node names there (Slurm needs them).
LAB_NETWORK="${DLTUNE_LAB_NETWORK:-dltune-lab}"
# Each node gets a blank loop-device data disk, linked as /dev/disk/by-id/dltune-lab-data inside it
# (inventory/lab.yml hands it to data_disks). Loop devices are host-global and few (8): 0 = none.
LAB_DATA_DISKS="${DLTUNE_LAB_DATA_DISKS:-1}"
LAB_DATA_DISK_SIZE="${DLTUNE_LAB_DATA_DISK_SIZE:-128M}"

# The loop device backing $1, if one is attached to it.
loop_of() { losetup --list --noheadings --output NAME,BACK-FILE | awk -v f="$1" '$2 == f {print $1; exit}'; }

attach_blank_disk() {
  local image="$LAB_STATE/disks/$1.img" loop
  mkdir -p "$LAB_STATE/disks"
  loop=$(loop_of "$image")
  [ -n "$loop" ] && losetup -d "$loop"
  rm -f "$image"
  truncate --size="$LAB_DATA_DISK_SIZE" "$image"
  loop=$(losetup --find --show "$image") || die "no free loop device for $1's data disk (losetup -a)"
  echo "$loop $image" >> "$LAB_STATE/loops"
  log "node $1: data disk $loop ($image)"
}

# The controller venv's PyTorch, read-only, for each node's bench environment (torch-env.sh).
torch_mounts=()
if torch_base=$(lab_torch_python_base); then
  torch_mounts=(--volume "$torch_base:$(lab_torch_node_base "$torch_base"):ro"
                --volume "$(lab_torch_site):$LAB_TORCH_SITE:ro")
fi

# The lab's "shared filesystem": a host directory every node bind-mounts at /shared with slave
# propagation, so a filesystem mounted under it later (the slow FUSE source of tests/lab/slowfs.py)
# appears in every node at once, as an NFS mount would. The host's mounts are private: make this one
# a shared mount of its own first.
LAB_SHARED="$LAB_STATE/shared"
mkdir -p "$LAB_SHARED"
if ! findmnt --mountpoint "$LAB_SHARED" >/dev/null; then
  mount --bind "$LAB_SHARED" "$LAB_SHARED"
  echo "$LAB_SHARED" >> "$LAB_STATE/mounts"
fi
mount --make-rshared "$LAB_SHARED"

if ! docker network inspect "$LAB_NETWORK" >/dev/null 2>&1; then
  docker network create --label org.dltune.lab=network "$LAB_NETWORK" >/dev/null
  echo "$LAB_NETWORK" >> "$LAB_STATE/networks"
fi

for node in $LAB_CONTROLLER $LAB_NODES; do
  state=$(docker inspect -f '{{.State.Status}}' "$node" 2>/dev/null || true)
  if [ "$state" = running ]; then
    log "node $node is running"
    continue
  fi
  [ -n "$state" ] && docker rm -f "$node" >/dev/null
  shared=(--mount "type=bind,source=$LAB_SHARED,target=/shared,bind-propagation=rslave")
  role=node extra=("${torch_mounts[@]}" "${shared[@]}")
  if [ "$node" = "$LAB_CONTROLLER" ]; then
    # The controller sees the shared filesystem too, as where a site keeps one slurm.conf for all.
    role=controller extra=("${shared[@]}")
  else
    # A new node starts with a blank disk, attached before the container so its /dev has the device.
    [ "$LAB_DATA_DISKS" = 1 ] && attach_blank_disk "$node"
  fi
  docker run -d --name "$node" --hostname "$node" --network "$LAB_NETWORK" --privileged \
    --tmpfs /run --tmpfs /run/lock --stop-signal SIGRTMIN+3 "${extra[@]}" \
    --label org.dltune.lab="$role" "$LAB_NODE_IMAGE" >/dev/null
  echo "$node" >> "$LAB_STATE/containers"
  log "started $role $node ($LAB_NODE_IMAGE)"
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
  if [ "$LAB_DATA_DISKS" = 1 ]; then
    loop=$(loop_of "$LAB_STATE/disks/$node.img")
    [ -n "$loop" ] || die "node $node has no data disk attached ($LAB_STATE/disks/$node.img)"
    docker exec "$node" mkdir -p /dev/disk/by-id
    docker exec "$node" ln -sfn "$loop" /dev/disk/by-id/dltune-lab-data
  fi
done

for node in $LAB_CONTROLLER $LAB_NODES; do
  for _ in $(seq 1 60); do
    state=$(docker exec "$node" systemctl is-system-running 2>/dev/null || true)
    case "$state" in running|degraded) break ;; esac
    sleep 0.5
  done
  log "node $node: systemd $state"
done

bash "$LAB_DIR/slurm.sh" "$LAB_CONTROLLER" "$LAB_NODES"
bash "$LAB_DIR/torch-env.sh" "$LAB_NODES"
