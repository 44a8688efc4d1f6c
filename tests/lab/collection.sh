#!/usr/bin/env bash
# The Ansible collection dltune.cluster, built by allow-list: a staging directory holds exactly the
# files git tracks under the collection's entries (SHIPPED below) and the nodes' wheelhouse
# (build/wheelhouse, the same path inside the installed collection as in the checkout), and
# ansible-galaxy builds from it. Nothing a site keeps in its checkout (a copied inventory with
# passwords, an .env, a key, a vault file) can ship, wherever it sits, unless git tracks it.
#   collection.sh            build/dltune-cluster-<version>.tar.gz
#   collection.sh release    also build/release/: that tarball and the dependency collections
#                            (ansible.posix, community.general, as the controller has them: the
#                            `ansible` package from PyPI carries both), for an offline install
source "$(dirname "$0")/lib.sh"
SHIPPED=(README.md LICENSE CHANGELOG.md galaxy.yml meta docs examples monitoring playbooks plugins roles)
# A dependency is named as galaxy.yml names it ("  ansible.posix: ..." under dependencies:).
mapfile -t DEPENDENCIES < <(sed -n '/^dependencies:/,/^[^ ]/s/^  \([a-z0-9_]*\.[a-z0-9_]*\):.*/\1/p' \
  "$REPO_ROOT/galaxy.yml")
VERSION=$(sed -n 's/^version: *//p' "$REPO_ROOT/galaxy.yml")
ARTIFACT="$BUILD_DIR/dltune-cluster-$VERSION.tar.gz"

git -C "$REPO_ROOT" rev-parse --git-dir >/dev/null 2>&1 \
  || die "$REPO_ROOT is not a git checkout: the collection ships what git tracks (clone the repository)"
command -v ansible-galaxy >/dev/null || die "ansible-galaxy is not on PATH: pip install ansible (ansible-core comes with it)"
[ -f "$WHEELHOUSE.tar" ] && compgen -G "$WHEELHOUSE/dltune-*.whl" >/dev/null \
  || die "no wheelhouse in $WHEELHOUSE (bash tests/lab/wheelhouse.sh, or make wheelhouse)"

stage="$BUILD_DIR/collection-stage"
rm -rf "$stage"
mkdir -p "$stage/build"
# Tracked files only, with their modes and links as git has them (tar keeps both).
git -C "$REPO_ROOT" ls-files -z -- "${SHIPPED[@]}" \
  | tar -C "$REPO_ROOT" --null -T - -cf - | tar -C "$stage" -xf -
cp -a "$WHEELHOUSE" "$WHEELHOUSE.tar" "$stage/build/"
ansible-galaxy collection build --force --output-path "$BUILD_DIR" "$stage" >/dev/null
rm -rf "$stage"
log "collection: $ARTIFACT ($(tar -tzf "$ARTIFACT" | grep -vc '/$') files)"

[ "${1:-}" = release ] || exit 0
release="$BUILD_DIR/release"
rm -rf "$release"
mkdir -p "$release"
cp "$ARTIFACT" "$release/"
defaults="$BUILD_DIR/ansible-defaults.cfg"   # Ansible's defaults, whatever config is around
: > "$defaults"
for name in "${DEPENDENCIES[@]}"; do
  # Where this controller's Ansible finds it (outside the checkout, whose ansible.cfg would put the
  # checkout's own collections/ first), packed as ansible-galaxy takes it (pack_installed_collection.py).
  path=$(cd / && ANSIBLE_CONFIG=$defaults ansible-galaxy collection list "$name" --format json 2>/dev/null \
    | python3 -c 'import json, sys; paths = json.load(sys.stdin); print(next(iter(paths), ""))') || true
  [ -n "$path" ] || die "the dependency collection $name is not installed on this controller: pip install ansible (it carries it)"
  python3 "$LAB_DIR/pack_installed_collection.py" "$path/${name/.//}" "$release" >/dev/null
done
rm -f "$defaults"
log "release: $(cd "$release" && ls | tr '\n' ' ')in $release"
log "install it from a directory outside this checkout (its ansible.cfg puts the checkout's collections/ first):"
log "  ansible-galaxy collection install --offline $release/*.tar.gz"
