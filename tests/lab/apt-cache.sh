#!/usr/bin/env bash
# The lab's apt cache: Debian's apt-cacher-ng on this host, so that repeated image builds and
# molecule runs do not download the same Ubuntu packages again. It listens on 127.0.0.1 (image
# builds: mmdebstrap runs apt on the host) and on the Docker bridge's address (the containers: the
# lab images find it through apt's Proxy-Auto-Detect, tests/lab/images/apt-proxy-detect, and go
# direct when it is down). The cache directory outlives lab-down; the daemon started here does not.
# DLTUNE_LAB_APT_CACHE=0 turns it off.
source "$(dirname "$0")/lib.sh"
need_root

[ "${DLTUNE_LAB_APT_CACHE:-1}" = 1 ] || { log "apt cache off (DLTUNE_LAB_APT_CACHE=0)"; exit 0; }
if apt_cache_up; then
  log "using the running apt cache on port $APT_CACHE_PORT"
  exit 0
fi
if ! command -v apt-cacher-ng >/dev/null; then
  log "installing apt-cacher-ng"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq apt-cacher-ng >/dev/null
fi
bridge=$(ip -4 -o addr show docker0 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
[ -n "$bridge" ] || die "no docker0 address: start the Docker engine first (docker-up.sh)"

mkdir -p "$APT_CACHE_DIR" "$LAB_STATE/apt-cacher-ng"
chown -R apt-cacher-ng: "$APT_CACHE_DIR" "$LAB_STATE/apt-cacher-ng" 2>/dev/null || true
nohup apt-cacher-ng ForeGround=1 Port="$APT_CACHE_PORT" BindAddress="127.0.0.1 $bridge" \
  CacheDir="$APT_CACHE_DIR" LogDir="$LAB_STATE/apt-cacher-ng" \
  PidFile="$LAB_STATE/apt-cacher-ng/pid" >"$LAB_STATE/apt-cacher-ng.log" 2>&1 &
echo $! > "$LAB_STATE/apt-cacher-ng.started"
for _ in $(seq 1 50); do
  if apt_cache_up; then
    log "apt cache up on 127.0.0.1 and $bridge port $APT_CACHE_PORT (pid $(cat "$LAB_STATE/apt-cacher-ng.started"))"
    exit 0
  fi
  sleep 0.2
done
tail -20 "$LAB_STATE/apt-cacher-ng.log" >&2
die "apt-cacher-ng did not start (log: $LAB_STATE/apt-cacher-ng.log)"
