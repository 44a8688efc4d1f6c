#!/usr/bin/env bash
# A site's PyTorch environment on each lab node (what a site keeps on its GPU nodes: a conda env, a
# module's Python), without downloading PyTorch into every node: nodes.sh mounts the controller's
# venv site-packages (torch, torchvision: pip install -e '.[bench]') read-only at $LAB_TORCH_SITE and
# its base Python at the same path (a system prefix such as /usr elsewhere: lib.sh). Here each node
# gets /opt/site-pytorch, a venv of that Python that sees the mounted packages, and nothing of
# dltune's: role dltune is pointed at it the documented way (inventory/lab.yml: dltune_bench_python:
# /opt/site-pytorch/bin/python3), so `dltune bench` and the bench of `dltune check` run on it from the
# dltune the role installed.
source "$(dirname "$0")/lib.sh"
need_root
read -r -a nodes <<< "${1:?usage: torch-env.sh \"NODE...\"}"
base=$(lab_torch_python_base) || { log "no PyTorch in $REPO_ROOT/.venv: lab nodes get no bench environment"; exit 0; }
node_base=$(lab_torch_node_base "$base")  # where the nodes see it (lib.sh)
version=$(lab_torch_python_version)
for node in "${nodes[@]}"; do
  docker exec "$node" test -d "$LAB_TORCH_SITE/torch" \
    || die "node $node has no $LAB_TORCH_SITE/torch: started before torch-env existed (make lab-down)"
  # Job users reach the mounted interpreter: open the (container's own) parents of its path.
  parent="$node_base"
  while parent=$(dirname "$parent") && [ "$parent" != / ]; do docker exec "$node" chmod o+x "$parent"; done
  docker exec "$node" "$node_base/bin/python3" -m venv --without-pip --clear /opt/site-pytorch
  # A plain path line, not site.addsitedir: the controller's editable dltune must not load here.
  echo "$LAB_TORCH_SITE" | docker exec -i "$node" tee "/opt/site-pytorch/lib/$version/site-packages/lab-torch.pth" >/dev/null
  # Importing torch leaves a torchinductor_<user> directory in $TMPDIR: keep /tmp empty, or role
  # tmpfs_tmp (rightly) will not mount its tmpfs over it until a reboot.
  docker exec "$node" runuser -u nobody -- env TMPDIR=/var/tmp \
    /opt/site-pytorch/bin/python -c 'import torch, torchvision' \
    || die "node $node: /opt/site-pytorch cannot import torch and torchvision"
  docker exec "$node" rm -rf /var/tmp/torchinductor_nobody
  log "node $node: the site's PyTorch environment /opt/site-pytorch"
done
