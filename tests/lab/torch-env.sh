#!/usr/bin/env bash
# A PyTorch environment on each lab node, for `dltune bench` (and its --multi-node run over the lab's
# Slurm), without downloading PyTorch into every node: nodes.sh mounts the controller's venv
# site-packages (torch, torchvision: pip install -e '.[bench]') read-only at $LAB_TORCH_SITE and its
# base Python at the same path. Here each node gets /opt/dltune-bench, a venv of that Python that
# sees the mounted packages and has dltune from the wheelhouse installed in it. This stands in for
# the PyTorch environment a site keeps on its GPU nodes (a conda env, a module, a container).
source "$(dirname "$0")/lib.sh"
need_root
read -r -a nodes <<< "${1:?usage: torch-env.sh \"NODE...\"}"
base=$(lab_torch_python_base) || { log "no PyTorch in $REPO_ROOT/.venv: lab nodes get no bench environment"; exit 0; }
wheel=$(ls "$WHEELHOUSE"/dltune-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || die "no dltune wheel in $WHEELHOUSE (bash tests/lab/wheelhouse.sh)"
version=$(basename "$(ls -d "$base"/lib/python3.* | head -1)")
for node in "${nodes[@]}"; do
  docker exec "$node" test -d "$LAB_TORCH_SITE/torch" \
    || die "node $node has no $LAB_TORCH_SITE/torch: started before torch-env existed (make lab-down)"
  # Job users reach the mounted interpreter: open the (container's own) parents of its path.
  parent="$base"
  while parent=$(dirname "$parent") && [ "$parent" != / ]; do docker exec "$node" chmod o+x "$parent"; done
  docker exec "$node" "$base/bin/python3" -m venv --without-pip --clear /opt/dltune-bench
  # A plain path line, not site.addsitedir: the controller's editable dltune must not load here.
  echo "$LAB_TORCH_SITE" | docker exec -i "$node" tee "/opt/dltune-bench/lib/$version/site-packages/lab-torch.pth" >/dev/null
  # Into the venv, not /tmp: docker cp writes beneath the node's own tmpfs /tmp, where pip cannot see it.
  docker cp "$wheel" "$node:/opt/dltune-bench/$(basename "$wheel")"
  docker exec "$node" /opt/dltune-bench/bin/python -m pip install --quiet --no-index --no-deps \
    --force-reinstall --disable-pip-version-check "/opt/dltune-bench/$(basename "$wheel")"
  docker exec "$node" rm -f "/opt/dltune-bench/$(basename "$wheel")"
  # Importing torch leaves a torchinductor_<user> directory in $TMPDIR: keep /tmp empty, or role
  # tmpfs_tmp (rightly) will not mount its tmpfs over it until a reboot.
  docker exec "$node" runuser -u nobody -- env TMPDIR=/var/tmp \
    /opt/dltune-bench/bin/python -c 'import torch, torchvision, dltune.bench.ddp' \
    || die "node $node: /opt/dltune-bench cannot import torch, torchvision and dltune"
  docker exec "$node" rm -rf /var/tmp/torchinductor_nobody
  log "node $node: PyTorch environment /opt/dltune-bench (dltune bench)"
done
