"""Paths under a re-settable root, so every probe can read a fixture tree instead of ``/``."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from dltune.files.safeio import read_regular

# The kernel gives up after 40 links in one lookup (ELOOP); so does resolve().
MAX_LINKS = 40


class HostFS:
    """Reads host files under ``root`` (default ``/``); tests point it at ``tests/fixtures/<case>``."""

    def __init__(self, root: str | Path = "/") -> None:
        self.root = Path(root)

    def path(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    def read_bytes(self, host_path: str, max_bytes: int | None = None) -> bytes:
        """Every read of a host file goes through here: regular files only, so a FIFO, a socket or a
        device under the root (a fixture tree anyone could write) never blocks the audit; they raise
        ``OSError`` like any file that cannot be read (see dltune.files.safeio.read_regular)."""
        return read_regular(self.path(host_path), max_bytes)

    def read_text(self, host_path: str) -> str:
        return self.read_bytes(host_path).decode("utf-8", errors="surrogateescape")

    def read_stripped(self, host_path: str) -> str | None:
        """A sysfs-style one-value file, stripped; None where it cannot be read (absent, no access)."""
        try:
            return self.read_text(host_path).strip()
        except OSError:
            return None

    def exists(self, host_path: str) -> bool:
        return self.path(host_path).exists()

    def resolve(self, host_path: str) -> str:
        """``host_path`` with every symlink followed as the audited host would follow it: an absolute
        link target restarts at the root (the fixture tree, not this machine's ``/``). A missing
        component ends the lookup where it is, as ``realpath -m`` does."""
        resolved: list[str] = []
        pending = list(PurePosixPath("/", host_path).parts[1:])
        links = 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            if part == ".":
                continue
            candidate = self.path("/" + "/".join([*resolved, part]))
            if links < MAX_LINKS and candidate.is_symlink():
                links += 1
                target = os.readlink(candidate)
                if target.startswith("/"):
                    resolved = []
                pending = [p for p in PurePosixPath(target).parts if p != "/"] + pending
                continue
            resolved.append(part)
        return "/" + "/".join(resolved)
