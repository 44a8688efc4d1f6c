"""Build a job's scratch tree the way a job would leave it, as whoever runs this (the hook tests run it
as an ordinary user through setpriv, so the tree is the user's, or as root for an admin's leftovers).

    python3 -I hook_tree_builder.py JOB_DIR SPEC.json

SPEC is a list of operations, each with "path" (hex-encoded name bytes from JOB_DIR: any byte but
'/' and NUL) and "kind": dir, file (with "size"), link (with "target"), fifo, chain (a directory
nested "depth" times under that name, with links to "links" planted at its bottom), or chmod (with
"mode", applied as given: list it after what it must not block). Every step works on descriptors, so
paths longer than PATH_MAX are fine."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def open_parent(root: int, parts: list[bytes]) -> int:
    fd = os.dup(root)
    for part in parts:
        child = os.open(part, FLAGS, dir_fd=fd)
        os.close(fd)
        fd = child
    return fd


def chain(fd: int, name: bytes, depth: int, links: list[str]) -> int:
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, FLAGS, dir_fd=fd)
        os.close(fd)
        fd = child
    for number, target in enumerate(links):
        os.symlink(target, f"link{number}", dir_fd=fd)
    return fd


def apply(fd: int, name: bytes, op: dict[str, Any]) -> int:
    kind = op["kind"]
    if kind == "dir":
        os.mkdir(name, dir_fd=fd)
    elif kind == "file":
        handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
        os.write(handle, b"x" * op.get("size", 1))
        os.close(handle)
    elif kind == "link":
        os.symlink(op["target"], name, dir_fd=fd)
    elif kind == "fifo":
        os.mkfifo(name, dir_fd=fd)
    elif kind == "chain":
        fd = chain(fd, name, op["depth"], op.get("links", []))
    elif kind == "chmod":
        os.chmod(name, op["mode"], dir_fd=fd)
    else:
        raise ValueError(f"unknown kind {kind}")
    return fd


def main() -> None:
    root = os.open(sys.argv[1], FLAGS)
    with open(sys.argv[2]) as handle:
        spec = json.load(handle)
    for op in spec:
        *where, name = [bytes.fromhex(part) for part in op["path"]]
        fd = open_parent(root, where)
        os.close(apply(fd, name, op))


if __name__ == "__main__":
    main()
