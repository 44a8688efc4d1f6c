#!/usr/bin/env bash
# make demo: the admin's path on the lab. The README's Install block, verbatim, with a HOME of its own
# outside the checkout ($LAB_STATE/demo-admin): `make release`, the three collections installed
# offline, the controller's dltune in ~/dltune-venv, the example ansible.cfg in ~/dltune-site. From
# there, as the README's Run section does, with the lab's inventory (inventory/: the lab containers,
# and the NFS VM while it runs): dltune.cluster.site, each node's audit as an ordinary user,
# dltune.cluster.bench (each node on the PyTorch the role gave it, and one data-parallel run over
# Slurm) and dltune.cluster.audit: the report in build/report/. Nothing of the checkout's ansible.cfg.
source "$(dirname "$0")/lib.sh"
home="$LAB_STATE/demo-admin"
report="$BUILD_DIR/report"
rm -rf "$home" && mkdir -p "$home"
install=$(python3 -c 'import re, sys
text = open(sys.argv[1]).read().split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
print(re.search(r"```sh\n(.*?)```", text, re.S).group(1))' "$REPO_ROOT/README.md")
as_admin() { env -u ANSIBLE_CONFIG -u DLTUNE_WHEELHOUSE HOME="$home" "$@"; }
log "the README's Install block, as $home"
(cd "$REPO_ROOT" && as_admin bash -euo pipefail -c "$install")
cd "$home/dltune-site"
playbook() { as_admin ansible-playbook "$@" -i "$REPO_ROOT/inventory"; }
timed playbook dltune.cluster.site
for node in $(docker ps --filter label=org.dltune.lab=node --format '{{.Names}}' | sort); do
  log "dltune audit on $node, as an ordinary user"
  docker exec "$node" runuser -u nobody -- dltune audit || true
done
merge=(-e "dltune_report_dir=$report" -e "dltune_report_executable=$home/dltune-venv/bin/dltune")
timed playbook dltune.cluster.bench "${merge[@]}" -e dltune_bench_multinode=true
timed playbook dltune.cluster.audit "${merge[@]}"
log "the cluster report: $report/report.html"
