# Shared settings of the lab scripts (sourced). Everything the lab starts is recorded under
# LAB_STATE so that lab-down.sh stops exactly that, by PID, and nothing else.
set -euo pipefail
LAB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$LAB_DIR/../.." && pwd)"
BUILD_DIR="${DLTUNE_BUILD_DIR:-$REPO_ROOT/build}"
WHEELHOUSE="${DLTUNE_WHEELHOUSE:-$BUILD_DIR/wheelhouse}"
LAB_STATE="${DLTUNE_LAB_STATE:-/var/tmp/dltune-lab}"
LAB_IMAGE_REPO="${DLTUNE_LAB_IMAGE_REPO:-dltune-lab/ubuntu}"
LAB_RELEASES="${DLTUNE_LAB_RELEASES:-22.04 24.04}"
UBUNTU_MIRROR="${DLTUNE_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}"
# Fixed, not configurable: the lab images look for the cache on this port (images/apt-proxy-detect).
APT_CACHE_PORT=3142
APT_CACHE_DIR="${DLTUNE_LAB_APT_CACHE_DIR:-/var/cache/apt-cacher-ng}"
mkdir -p "$LAB_STATE" "$BUILD_DIR"

log() { printf '[lab] %s\n' "$*" >&2; }
die() { printf '[lab] ERROR: %s\n' "$*" >&2; exit 1; }

# Run a command and print how long it took, so CI shows each phase's wall time.
# A failure still stops the script (set -e): `cmd || ...` here would switch errexit off inside cmd.
timed() {
  local start=$EPOCHREALTIME
  "$@"
  awk -v a="$start" -v b="$EPOCHREALTIME" -v c="$*" 'BEGIN{printf "[time] %-40s %6.1fs\n", c, b-a}' >&2
}

codename_of() {
  case "$1" in
    22.04) echo jammy ;;
    24.04) echo noble ;;
    *) die "unknown Ubuntu release $1 (known: 22.04 24.04)" ;;
  esac
}

# apt-cacher-ng answers its root URL with a "406 Usage Information" page naming itself.
apt_cache_up() {
  curl -s --max-time 2 "http://127.0.0.1:$APT_CACHE_PORT/" 2>/dev/null | grep -q "Apt-Cacher NG"
}

need_root() { [ "$(id -u)" = 0 ] || die "the lab needs root (Docker engine, loop devices, namespaces)"; }

# Where lab nodes see the controller venv's site-packages (PyTorch), read-only (torch-env.sh).
LAB_TORCH_SITE=/opt/dltune-lab/torch-site
# The base Python of the repo's venv when that venv has PyTorch: nodes mount it at the same path.
lab_torch_python_base() {
  local py="$REPO_ROOT/.venv/bin/python"
  [ -x "$py" ] && "$py" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null \
    && "$py" -c 'import sys; print(sys.base_prefix)'
}
# Where the nodes mount that base Python: at its own path (a pyenv or /opt build may name its own
# path inside, an rpath to its libpython), except a system prefix (/usr, /usr/local: the venv of a
# stock Ubuntu's python3), which mounted there would hide the node's own /usr (and make it read-only:
# `docker cp` into it fails). That one goes to $LAB_TORCH_RELOCATED_BASE: CPython finds its library
# beside its executable, and the host's /usr/bin/python3 runs on the node image (checked, 22.04).
LAB_TORCH_RELOCATED_BASE=/opt/dltune-lab/python-base
lab_torch_node_base() {
  case "$1" in
    / | /usr | /usr/*) echo "$LAB_TORCH_RELOCATED_BASE" ;;
    *) echo "$1" ;;
  esac
}
# The venv's Python version as its lib/ directory names it (python3.11).
lab_torch_python_version() {
  "$REPO_ROOT/.venv/bin/python" -c 'import sys; print("python%d.%d" % sys.version_info[:2])'
}
lab_torch_site() { "$REPO_ROOT/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
