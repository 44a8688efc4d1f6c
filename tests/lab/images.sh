#!/usr/bin/env bash
# Build the lab's Ubuntu images locally (no container registry is reachable): mmdebstrap to a tar
# file, then `docker import`. An image is rebuilt only when its inputs (package list, this script,
# release) change: their hash is stored as an image label.
source "$(dirname "$0")/lib.sh"
need_root
command -v mmdebstrap >/dev/null || { log "installing mmdebstrap"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null; }

KEYRING_DIR="$BUILD_DIR/ubuntu-keyring"
ubuntu_keyring() {
  local keyring="$KEYRING_DIR/usr/share/keyrings/ubuntu-archive-keyring.gpg"
  if [ ! -s "$keyring" ]; then
    # Debian has no Ubuntu keyring package: take ubuntu-keyring from the Ubuntu archive itself.
    local deb_path
    deb_path=$(curl -fsS "$UBUNTU_MIRROR/dists/noble/main/binary-amd64/Packages.gz" | zcat \
      | awk '/^Package: ubuntu-keyring$/{p=1} p&&/^Filename:/{print $2; exit}')
    [ -n "$deb_path" ] || die "cannot find ubuntu-keyring in $UBUNTU_MIRROR"
    curl -fsS -o "$BUILD_DIR/ubuntu-keyring.deb" "$UBUNTU_MIRROR/$deb_path"
    rm -rf "$KEYRING_DIR"
    dpkg-deb -x "$BUILD_DIR/ubuntu-keyring.deb" "$KEYRING_DIR"
    chmod -R a+rX "$KEYRING_DIR"   # apt downloads as _apt
  fi
  echo "$keyring"
}

PROXY_DETECT="$LAB_DIR/images/apt-proxy-detect"

apt_cache_url() {
  if apt_cache_up; then
    echo "http://127.0.0.1:$APT_CACHE_PORT"
  fi
}

# build_image RELEASE [VARIANT]: VARIANT (e.g. slurm) adds images/packages-VARIANT.txt and tags
# the image $LAB_IMAGE_REPO-VARIANT:RELEASE (the Slurm scenario's node has Slurm baked in).
build_image() {
  local release=$1 variant=${2:-} codename tag inputs_hash current tar keyring packages lists name
  codename=$(codename_of "$release")
  lists=("$LAB_DIR/images/packages.txt")
  name="ubuntu-$release"
  tag="$LAB_IMAGE_REPO:$release"
  if [ -n "$variant" ]; then
    lists+=("$LAB_DIR/images/packages-$variant.txt")
    name="ubuntu-$variant-$release"
    tag="$LAB_IMAGE_REPO-$variant:$release"
  fi
  packages=$(cat "${lists[@]}" | grep -v '^\s*#' | grep -v '^\s*$' | paste -sd, -)
  inputs_hash=$(cat "${lists[@]}" "$0" "$PROXY_DETECT" <(echo "$release") | sha256sum | cut -c1-16)
  current=$(docker image inspect -f '{{ index .Config.Labels "org.dltune.lab.inputs" }}' "$tag" 2>/dev/null || true)
  if [ "$current" = "$inputs_hash" ]; then
    log "image $tag is up to date ($inputs_hash)"
    return 0
  fi
  keyring=$(ubuntu_keyring)
  tar="$BUILD_DIR/images/$name-$inputs_hash.tar"
  mkdir -p "$BUILD_DIR/images"
  if [ ! -s "$tar" ]; then
    log "building $tag ($codename) with: $packages"
    # Build to a file first: a failed mmdebstrap piped into `docker import` would leave an empty image.
    rm -f "$BUILD_DIR/images/$name-"*.tar*
    # Through the lab's apt cache when it runs (apt on the host reads http_proxy); the image itself
    # gets only the auto-detect hook, which falls back to a direct connection.
    local proxy
    proxy=$(apt_cache_url)
    env ${proxy:+http_proxy=$proxy} \
      mmdebstrap --variant=apt --format=tar --components=main,restricted,universe --include="$packages" \
      --keyring="$keyring" --aptopt='Acquire::Retries "3"' \
      --customize-hook='echo lab-node > "$1/etc/hostname"' \
      --customize-hook='rm -f "$1/etc/machine-id"; touch "$1/etc/machine-id"' \
      --customize-hook="install -D -m 0755 '$PROXY_DETECT' \"\$1/usr/local/lib/dltune-lab/apt-proxy-detect\"" \
      --customize-hook='echo "Acquire::http::Proxy-Auto-Detect \"/usr/local/lib/dltune-lab/apt-proxy-detect\";" \
        > "$1/etc/apt/apt.conf.d/01dltune-lab-proxy"' \
      "$codename" "$tar.partial" \
      "deb $UBUNTU_MIRROR $codename main restricted universe" \
      "deb $UBUNTU_MIRROR $codename-updates main restricted universe" \
      "deb $UBUNTU_MIRROR $codename-security main restricted universe" >&2
    mv "$tar.partial" "$tar"
  fi
  docker import \
    --change 'CMD ["/sbin/init"]' \
    --change "LABEL org.dltune.lab.inputs=$inputs_hash" \
    --change 'ENV container=docker' \
    "$tar" "$tag" >/dev/null
  log "built $tag"
}

for release in ${1:-$LAB_RELEASES}; do
  timed build_image "$release"
done
for release in ${LAB_SLURM_RELEASES:-22.04}; do
  timed build_image "$release" slurm
done
