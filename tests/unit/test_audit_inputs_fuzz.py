"""No input file can crash the audit: every file the probes read, made empty, binary, one 10 MB line,
a directory, unreadable, or (for JSON) wrongly shaped, still gives a complete JSON envelope and an
exit code of the contract, and a file that prevents a judgement is a `fail` naming it.

Tests run as root, so "unreadable" is injected where files are read (HostFS.read_bytes), the lowest
point the probes share; everything else is a real file in a real tree under --root."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dltune.cli import app
from dltune.probes.hostfs import HostFS
from tests.conftest import FIXTURES

MANIFEST = "/etc/dltune/expected.d"
PLAIN_FILES = (
    "/proc/self/mountinfo",
    "/etc/fstab",
    "/proc/meminfo",
    "/run/reboot-required",
    "/run/reboot-required.pkgs",
    "/proc/driver/nvidia/version",
    "/proc/modules",
    "/proc/sys/kernel/dmesg_restrict",
    "/var/lib/dpkg/status",
    "/proc/self/mountstats",
)
FRAGMENTS = tuple(
    f"{MANIFEST}/{role}.json"
    for role in ("tmpfs_tmp", "data_disks", "nvidia_driver", "nfs_multivip", "dl_env", "slurm_tmpdir")
)
# Files whose loss must be a `fail` of the checks that need them (not a pass, not an error).
JUDGED_FROM = {
    "/proc/self/mountinfo": "storage.tmp_tmpfs",
    "/etc/fstab": "storage.fstab_parse",
    f"{MANIFEST}/tmpfs_tmp.json": "storage.tmp_tmpfs",
    f"{MANIFEST}/data_disks.json": "storage.data_noatime",
    f"{MANIFEST}/nvidia_driver.json": "driver.branch",
    f"{MANIFEST}/nfs_multivip.json": "nfs.vip_mounts",
    f"{MANIFEST}/dl_env.json": "env.cublas_workspace",
    f"{MANIFEST}/slurm_tmpdir.json": "staging.slurm_hooks",
}
BINARY = bytes(range(256)) * 64 + b"\xff\xfe\x00\n\x80"
WRONG_SHAPES = (
    b"[1, 2, 3]",
    b'{"schema_version": 1, "role": "data_disks", "disks": {"mount_point": 7}}',
    b'{"schema_version": "1", "role": 5, "variables": [], "base": null, "vips": "10.0.0.1"}',
    b"[" * 200_000 + b"]" * 200_000,
    b'{"schema_version": 1e999, "role": "\\ud800"}',
)

runner = CliRunner()


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "golden_ubuntu_server", root)
    shutil.copytree(FIXTURES / "data_ok_managed" / "etc" / "dltune", root / "etc" / "dltune")
    (root / "run").mkdir(exist_ok=True)
    return root


def _audit(root: Path) -> tuple[int, dict[str, Any]]:
    done = runner.invoke(app, ["audit", "--root", str(root), "--format", "json"])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output[-2000:]
    assert done.exit_code in (0, 1, 2), done.output[-2000:]
    envelope = json.loads(done.stdout)
    assert {"schema_version", "tool_version", "host", "time", "valid_until", "results"} <= set(envelope)
    assert envelope["results"], envelope
    if done.exit_code == 2:
        assert any(r["status"] == "error" for r in envelope["results"])
    return done.exit_code, envelope


def _write(root: Path, host_path: str, content: bytes | None) -> None:
    path = root / host_path.lstrip("/")
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)


KINDS: dict[str, bytes | None] = {
    "empty": b"",
    "binary": BINARY,
    "one 10 MB line": b"x" * (10 << 20),
    "a directory": None,
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("host_path", PLAIN_FILES + FRAGMENTS)
def test_a_bad_file_never_crashes_the_audit(tmp_path: Path, host_path: str, kind: str) -> None:
    root = _tree(tmp_path)
    _write(root, host_path, KINDS[kind])
    rc, envelope = _audit(root)
    blocked = JUDGED_FROM.get(host_path)
    if blocked and (host_path.endswith(".json") or kind == "a directory"):
        result = next(r for r in envelope["results"] if r["id"] == blocked)
        assert result["status"] == "fail" and rc == 1, result
        assert host_path in json.dumps(result["evidence"]) or host_path.rsplit("/", 1)[1] in result["summary"]


@pytest.mark.parametrize("shape", range(len(WRONG_SHAPES)))
@pytest.mark.parametrize("host_path", FRAGMENTS)
def test_a_wrongly_shaped_fragment_fails_its_checks_and_never_crashes(
    tmp_path: Path, host_path: str, shape: int
) -> None:
    root = _tree(tmp_path)
    _write(root, host_path, WRONG_SHAPES[shape])
    rc, envelope = _audit(root)
    result = next(r for r in envelope["results"] if r["id"] == JUDGED_FROM[host_path])
    assert result["status"] == "fail" and rc == 1, result
    assert "cannot judge" in result["summary"]


@pytest.mark.parametrize("host_path", PLAIN_FILES + FRAGMENTS)
def test_an_unreadable_file_never_crashes_the_audit(
    tmp_path: Path, host_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path)
    _write(root, host_path, b"present but unreadable\n")
    target = root / host_path.lstrip("/")
    original_read: Callable[[HostFS, str, int | None], bytes] = HostFS.read_bytes

    def read_bytes(self: HostFS, path: str, max_bytes: int | None = None) -> bytes:
        if self.path(path) == target:
            raise PermissionError(13, "Permission denied")
        return original_read(self, path, max_bytes)

    monkeypatch.setattr(HostFS, "read_bytes", read_bytes)
    rc, envelope = _audit(root)
    blocked = JUDGED_FROM.get(host_path)
    if blocked:
        result = next(r for r in envelope["results"] if r["id"] == blocked)
        assert result["status"] == "fail" and "Permission denied" in result["summary"], result
        assert rc == 1
