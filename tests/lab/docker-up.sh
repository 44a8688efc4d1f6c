#!/usr/bin/env bash
# A Docker engine for the lab. Uses the one already running (a normal host's service); otherwise
# installs Debian's docker.io and starts dockerd by hand (no service manager here), recording its
# PID so lab-down.sh stops exactly it. Where root lacks CAP_SYS_RESOURCE, registers the runc
# wrapper as the default runtime of that dockerd only.
source "$(dirname "$0")/lib.sh"
need_root

if docker info >/dev/null 2>&1; then
  log "using the running Docker engine"
  exit 0
fi
if ! command -v dockerd >/dev/null; then
  log "installing docker.io"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi

# CAP_SYS_RESOURCE is capability 24: test its bit in root's bounding set.
cap_bnd=$(awk '/^CapBnd:/{print $2}' /proc/self/status)
config="$LAB_STATE/daemon.json"
if (( (16#$cap_bnd >> 24) & 1 )); then
  echo '{}' > "$config"
else
  log "root lacks CAP_SYS_RESOURCE: privileged containers run through the runc wrapper"
  install -D -m 0755 "$LAB_DIR/runc-nosysresource" "$LAB_STATE/bin/runc-nosysresource"
  printf '{"runtimes":{"runc-nsr":{"path":"%s"}},"default-runtime":"runc-nsr"}\n' \
    "$LAB_STATE/bin/runc-nosysresource" > "$config"
fi

nohup dockerd --config-file "$config" --pidfile "$LAB_STATE/dockerd.pid" >"$LAB_STATE/dockerd.log" 2>&1 &
echo $! > "$LAB_STATE/dockerd.started"
for _ in $(seq 1 100); do
  docker info >/dev/null 2>&1 && { log "dockerd up (pid $(cat "$LAB_STATE/dockerd.started"))"; exit 0; }
  kill -0 "$(cat "$LAB_STATE/dockerd.started")" 2>/dev/null || break
  sleep 0.2
done
tail -20 "$LAB_STATE/dockerd.log" >&2
die "dockerd did not start (log: $LAB_STATE/dockerd.log)"
