#!/usr/bin/env bash
# nfs-storage.sh up|down — a real userspace NFS server (nfs-ganesha) answering on several storage VIPs,
# and a client namespace with two NICs in the same subnet, as in a two-NIC GPU server.
#
#   namespace dltune-nfs-storage: bridge br0 holding the VIPs .6-.9; ganesha + rpcbind; exports /nfs0
#   namespace dltune-nfs-client:  em1 (.112) and em2 (.113), veths into br0
#   taps tapem1/tapem2 on br0:   em1 (.122) and em2 (.123) of the VM (nfs-vm.sh start)
#
# Address rule: the test subnet exists only inside these namespaces, and a blackhole route for it in
# the root namespace (added first, removed last) makes sure nothing for it ever leaves the machine.
# No kernel NFS is used (the running kernel has none): clients read with libnfs (nfs-cat).
source "$(dirname "$0")/lib.sh"
need_root

NFS_STATE=$LAB_STATE/nfs
NS_STORAGE=dltune-nfs-storage
NS_CLIENT=dltune-nfs-client
NET=${DLTUNE_NFS_NET:-10.21.115}
VIPS=(6 7 8 9)

stop_pid() {  # stop_pid NAME: the process recorded under NAME, waiting for it (ganesha takes 2-3 s)
  local file=$NFS_STATE/$1.pid pid
  [ -s "$file" ] || return 0
  pid=$(cat "$file")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

down() {
  stop_pid ganesha
  stop_pid rpcbind
  ip netns del "$NS_CLIENT" 2>/dev/null || true
  ip netns del "$NS_STORAGE" 2>/dev/null || true
  ip route del blackhole "$NET.0/24" 2>/dev/null || true
  rm -f /run/rpcbind.sock /run/rpcbind.lock
  log "nfs storage lab down"
}

up() {
  local missing=()
  for tool in ganesha.nfsd rpcbind nfs-cat; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing nfs-ganesha, libnfs-utils, rpcbind (missing: ${missing[*]})"
    local packages=(nfs-ganesha nfs-ganesha-vfs libnfs-utils rpcbind)
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
          "${packages[@]}" >/dev/null; }
  fi
  down >/dev/null 2>&1
  mkdir -p "$NFS_STATE/ganesha/recov" "$NFS_STATE/export/nfs0"
  ip route replace blackhole "$NET.0/24"
  ip netns add "$NS_STORAGE"
  ip netns add "$NS_CLIENT"
  ip link add em1 netns "$NS_CLIENT" type veth peer name sp1 netns "$NS_STORAGE"
  ip link add em2 netns "$NS_CLIENT" type veth peer name sp2 netns "$NS_STORAGE"
  ip -n "$NS_STORAGE" link add br0 type bridge
  # taps for the VM of nfs-vm.sh (its em1/em2), on the same bridge
  for tap in tapem1 tapem2; do ip -n "$NS_STORAGE" tuntap add dev "$tap" mode tap; done
  for link in sp1 sp2 tapem1 tapem2; do ip -n "$NS_STORAGE" link set "$link" master br0; done
  for link in lo sp1 sp2 tapem1 tapem2 br0; do ip -n "$NS_STORAGE" link set "$link" up; done
  for vip in "${VIPS[@]}"; do ip -n "$NS_STORAGE" addr add "$NET.$vip/24" dev br0; done
  ip -n "$NS_CLIENT" addr add "$NET.112/24" dev em1
  ip -n "$NS_CLIENT" addr add "$NET.113/24" dev em2
  for link in lo em1 em2; do ip -n "$NS_CLIENT" link set "$link" up; done
  head -c $((16 * 1024 * 1024)) /dev/urandom > "$NFS_STATE/export/nfs0/blob.bin"
  echo hello > "$NFS_STATE/export/nfs0/hello.txt"
  cat > "$NFS_STATE/ganesha/ganesha.conf" <<CONF
NFS_CORE_PARAM { Protocols = 3, 4; Mount_Path_Pseudo = true; Enable_NLM = false; Enable_RQUOTA = false; }
NFSv4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = $NFS_STATE/ganesha/recov; }
NFS_KRB5 { Active_krb5 = false; }
EXPORT { Export_Id = 1; Path = $NFS_STATE/export/nfs0; Pseudo = /nfs0; Access_Type = RW; Squash = No_Root_Squash;
         Protocols = 3, 4; Transports = TCP; SecType = sys; FSAL { Name = VFS; } }
LOG { Default_Log_Level = EVENT; }
CONF
  setsid ip netns exec "$NS_STORAGE" rpcbind -f -w > "$NFS_STATE/rpcbind.log" 2>&1 &
  echo $! > "$NFS_STATE/rpcbind.pid"
  sleep 0.3
  setsid ip netns exec "$NS_STORAGE" ganesha.nfsd -F -f "$NFS_STATE/ganesha/ganesha.conf" \
    -L "$NFS_STATE/ganesha/ganesha.log" -p "$NFS_STATE/ganesha/ganesha.pid" -N NIV_EVENT > /dev/null 2>&1 &
  echo $! > "$NFS_STATE/ganesha.pid"
  for _ in $(seq 1 100); do
    kill -0 "$(cat "$NFS_STATE/ganesha.pid")" 2>/dev/null || { tail -5 "$NFS_STATE/ganesha/ganesha.log" >&2; die "ganesha exited"; }
    ip netns exec "$NS_STORAGE" ss -Hltn "sport = :2049" | grep -q . && break
    sleep 0.1
  done
  for vip in "${VIPS[@]}"; do
    ip netns exec "$NS_CLIENT" nfs-cat "nfs://$NET.$vip/nfs0/hello.txt" >/dev/null || die "VIP $NET.$vip does not serve"
  done
  log "nfs storage lab up: VIPs ${VIPS[*]/#/$NET.} export /nfs0, client namespace $NS_CLIENT"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
