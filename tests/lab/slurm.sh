#!/usr/bin/env bash
# slurm.sh CONTROLLER "NODE...": the lab's Slurm. The containers (Ubuntu 22.04 with slurm-wlm and
# munge baked in) become one cluster "lab": slurmctld on CONTROLLER, slurmd on each NODE. This stands
# in for the site's own Slurm deployment, which dltune's roles never install: they only add their hooks to its slurm.conf. A node that already
# has a slurm.conf keeps it (site.yml's slurm_tmpdir has edited it); only new nodes get the lab's.
# cgroup plugins need more than a container: proctrack/linuxproc and task/none, as molecule/slurm_tmpdir.
source "$(dirname "$0")/lib.sh"
need_root
usage='usage: slurm.sh CONTROLLER "NODE..."'
controller=${1:?$usage}
read -r -a nodes <<< "${2:?$usage}"

munge_key="$LAB_STATE/munge.key"
if [ ! -s "$munge_key" ]; then
  (umask 077 && head -c 1024 /dev/urandom > "$munge_key")
fi

conf=$(mktemp)
trap 'rm -f "$conf"' EXIT
cpus=$(docker exec "${nodes[0]}" nproc)
{
  cat <<CONF
ClusterName=lab
SlurmctldHost=$controller
AuthType=auth/munge
SlurmUser=slurm
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
KillWait=5
CONF
  for node in "${nodes[@]}"; do
    echo "NodeName=$node CPUs=$cpus RealMemory=1000 State=UNKNOWN"
  done
  echo "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} > "$conf"

for node in "$controller" "${nodes[@]}"; do
  if docker exec "$node" test -e /etc/slurm/slurm.conf; then
    log "node $node: keeps its slurm.conf"
    continue
  fi
  docker cp "$munge_key" "$node:/etc/munge/munge.key"
  docker exec "$node" sh -c 'chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key'
  docker exec "$node" install -d -o slurm -g slurm -m 0755 \
    /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
  docker cp "$conf" "$node:/etc/slurm/slurm.conf"
  docker exec "$node" chmod 0644 /etc/slurm/slurm.conf
  # Job users of the lab, the same uid on every node (as LDAP/SSSD would give them).
  docker exec "$node" sh -c 'id alice >/dev/null 2>&1 || useradd --create-home --uid 2001 --shell /bin/bash alice'
  docker exec "$node" systemctl restart munge
  # Restart, not start: a daemon that came up at boot without a slurm.conf may be waiting to retry.
  daemons=(slurmd)
  [ "$node" = "$controller" ] && daemons=(slurmctld)
  for daemon in "${daemons[@]}"; do
    docker exec "$node" systemctl enable --quiet "$daemon"
    docker exec "$node" systemctl restart "$daemon"
  done
  if [ "$node" = "$controller" ]; then
    log "$node: slurmctld of cluster lab"
  else
    log "node $node: Slurm node of cluster lab (controller $controller)"
  fi
done

for _ in $(seq 1 60); do
  idle=$(docker exec "$controller" sinfo --noheader --responding --states=idle --format=%D 2>/dev/null || true)
  [ "${idle:-0}" -ge "${#nodes[@]}" ] 2>/dev/null && { log "Slurm: ${#nodes[@]} node(s) idle"; exit 0; }
  sleep 1
done
docker exec "$controller" sinfo >&2 || true
die "the lab's Slurm did not bring ${#nodes[@]} node(s) to idle (logs: /var/log/slurm in the nodes)"
