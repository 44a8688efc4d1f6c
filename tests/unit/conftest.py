"""Unit tests judge fixture trees and recorded outputs, never the machine they run on: a probe that
reads the real root (HostFS("/")) in a unit test's process fails the test. Tests that must read this
host (a real subprocess, a stand-in binary on PATH) live in tests/integration."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dltune.probes import hostfs


@pytest.fixture(autouse=True)
def _no_real_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    original = hostfs.HostFS.__init__

    def guarded(self: hostfs.HostFS, root: str | Path = "/", *args: Any, **kwargs: Any) -> None:
        if Path(root).resolve() == Path("/"):
            raise AssertionError("a unit test read the real host (HostFS('/')): give it a fixture root")
        original(self, root, *args, **kwargs)

    monkeypatch.setattr(hostfs.HostFS, "__init__", guarded)
    yield
