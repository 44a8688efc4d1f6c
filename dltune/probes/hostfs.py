"""Paths under a re-settable root, so every probe can read a fixture tree instead of ``/``."""

from __future__ import annotations

from pathlib import Path


class HostFS:
    """Reads host files under ``root`` (default ``/``); tests point it at ``tests/fixtures/<case>``."""

    def __init__(self, root: str | Path = "/") -> None:
        self.root = Path(root)

    def path(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    def read_text(self, host_path: str) -> str:
        return self.path(host_path).read_text(encoding="utf-8", errors="surrogateescape")

    def exists(self, host_path: str) -> bool:
        return self.path(host_path).exists()
