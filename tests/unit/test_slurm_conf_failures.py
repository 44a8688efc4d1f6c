"""Both slurm.conf modules, run in-process as Ansible runs them, on inputs a real site can hold that
end in a failure: the task fails with one line naming the file, never a traceback, and nothing is
written. An unreadable slurm.conf is a directory in its place (root reads any file); a read-only
filesystem is faked at the lowest boundary, the temporary's creation (tempfile.mkstemp), since
mounting one needs privileges a unit run does not have."""

from __future__ import annotations

import errno
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.conftest import load_role_module

keys_module = load_role_module("plugins/modules/slurm_conf_keys.py")
tmpdir_module = load_role_module("plugins/modules/slurm_tmpdir_conf.py")
SITE = b"ClusterName=c\r\n# caf\xe9\r\nProlog=/site/prolog\r\n"


def arguments(module_name: str, tmp_path: Path) -> dict[str, Any]:
    conf = str(tmp_path / "slurm.conf")
    if module_name == "keys":
        return {"conf": conf, "keys": {"HealthCheckInterval": "300"}, "record": str(tmp_path / "record.json")}
    hooks = {"prolog": "/x/prolog", "epilog": "/x/epilog", "task_prolog": "/x/task_prolog"}
    return {"conf": conf, "hooks": hooks, "hooks_config": str(tmp_path / "hooks.json")}


MODULES = {"keys": keys_module, "tmpdir": tmpdir_module}


def run(module_name: str, args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    capsys.readouterr()
    with patch_module_args({**args, "_ansible_no_log": True}), pytest.raises(SystemExit) as exited:
        MODULES[module_name].main()
    out = capsys.readouterr().out
    assert "Traceback" not in out
    return exited.value.code, json.loads(out)


def files(tmp_path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(tmp_path.iterdir()) if p.is_file()}


@pytest.mark.parametrize("module_name", MODULES)
def test_a_slurm_conf_that_cannot_be_read_fails_naming_it(
    module_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "slurm.conf").mkdir()
    rc, result = run(module_name, arguments(module_name, tmp_path), capsys)
    assert rc == 1 and result["failed"]
    assert result["msg"].startswith(f"{tmp_path}/slurm.conf") and "\n" not in result["msg"], result["msg"]
    assert files(tmp_path) == {}


@pytest.mark.parametrize("module_name", MODULES)
def test_a_read_only_filesystem_fails_naming_the_file_and_changes_nothing(
    module_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "slurm.conf").write_bytes(SITE)

    def read_only(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    rc, result = run(module_name, arguments(module_name, tmp_path), capsys)
    assert rc == 1 and "Read-only file system" in result["msg"] and "\n" not in result["msg"]
    assert str(tmp_path) in result["msg"]
    assert files(tmp_path) == {"slurm.conf": SITE}


@pytest.mark.parametrize(
    "record",
    [
        b"[]",
        b'{"edits": []}',
        b'{"edits": {"HealthCheckInterval": "60"}}',
        b"\xff\xfe",
        b'{"site_values": 3}',
    ],
)
def test_a_record_of_another_shape_fails_naming_it_before_any_change(
    record: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "slurm.conf").write_bytes(SITE)
    (tmp_path / "record.json").write_bytes(record)
    rc, result = run("keys", arguments("keys", tmp_path), capsys)
    assert rc == 1 and result["msg"].startswith(f"{tmp_path}/record.json is not the role's")
    assert files(tmp_path) == {"record.json": record, "slurm.conf": SITE}


@pytest.mark.parametrize(
    "hooks_json", [b"[]", b'{"site_hooks": []}', b'{"site_hooks": {}, "conf_edits": {"Prolog": 1}}']
)
def test_a_hooks_json_of_another_shape_fails_naming_it_before_any_change(
    hooks_json: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "slurm.conf").write_bytes(SITE)
    (tmp_path / "hooks.json").write_bytes(hooks_json)
    rc, result = run("tmpdir", arguments("tmpdir", tmp_path), capsys)
    assert rc == 1 and result["msg"].startswith(f"{tmp_path}/hooks.json"), result["msg"]
    assert files(tmp_path) == {"hooks.json": hooks_json, "slurm.conf": SITE}
