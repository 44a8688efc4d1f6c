#!/usr/bin/env bash
# The wheelhouse: dltune and its runtime dependencies as wheels, for every target Python (Ubuntu
# 22.04's 3.10 to 24.04's 3.12), so lab containers and real nodes install dltune offline.
source "$(dirname "$0")/lib.sh"
PY="${PYTHON:-$( [ -x "$REPO_ROOT/.venv/bin/python" ] && echo "$REPO_ROOT/.venv/bin/python" || echo python3)}"
mkdir -p "$WHEELHOUSE" "$REPO_ROOT/build"
# One build at a time from this tree: setuptools builds in place (build/lib, dltune.egg-info), so two
# runs at once (two makes, or the two tests that run this script beside each other) would mix files.
exec 8>"$REPO_ROOT/build/.wheelhouse.lock"
flock 8
rm -f "$WHEELHOUSE"/*.whl   # no stale versions beside the ones pyproject.toml asks for
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$WHEELHOUSE" "$REPO_ROOT"
# The runtime dependencies as pyproject.toml lists them (a line per quoted requirement, without tomllib:
# the script needs only a python3 with pip, 3.10 included).
requirements=$(sed -n '/^dependencies = \[/,/^\]/p' "$REPO_ROOT/pyproject.toml" | sed -n 's/^ *"\([^"]*\)".*/\1/p')
[ -n "$requirements" ] || die "no dependencies found in $REPO_ROOT/pyproject.toml"
# Every node kind the bench's spec table knows: x86_64 servers and aarch64 (GH200, GB200) ones.
for arch in x86_64 aarch64; do
  for pyver in 3.10 3.11 3.12; do
    # shellcheck disable=SC2086
    printf '%s\n' "$requirements" | "$PY" -m pip download --quiet --dest "$WHEELHOUSE" \
      --only-binary=:all: --python-version "$pyver" --platform manylinux2014_$arch \
      --platform manylinux_2_17_$arch --platform manylinux_2_28_$arch --implementation cp -r /dev/stdin 2>&1 \
      | { grep -v "^WARNING: Location" || true; } >&2
  done
done
# One reproducible archive too: the dltune role ships it to nodes in a single transfer.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$WHEELHOUSE" -cf "$WHEELHOUSE.tar" .
log "wheelhouse: $(ls "$WHEELHOUSE" | wc -l) wheels in $WHEELHOUSE (+ $WHEELHOUSE.tar)"
