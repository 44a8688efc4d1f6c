"""plugins/action/save_node_reports.py: the controller writes every node's report file in one step, in a
directory the controller's user owns but where a link may already stand at a node's name (bench.yml
keeps earlier bench files). The hostile cases: a link at a node's name, a host name that would leave
the directory, a report directory that is itself a link. The playbooks' use of it is tested in
tests/integration/test_fleet_playbooks_defaults.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.conftest import load_role_module

pytest.importorskip("ansible")
action = load_role_module("plugins/action/save_node_reports.py")
AnsibleActionFail = pytest.importorskip("ansible.errors").AnsibleActionFail


def open_dir(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def test_a_link_at_a_nodes_name_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    report = tmp_path / "report"
    report.mkdir()
    (report / "gpu01.bench.json").symlink_to(victim)
    fd = open_dir(report)
    try:
        action.write_at(fd, "gpu01.bench.json", b'{"problem": "x"}')
    finally:
        os.close(fd)
    assert victim.read_text() == "keep me"
    written = report / "gpu01.bench.json"
    assert stat.S_ISREG(written.lstat().st_mode) and written.read_bytes() == b'{"problem": "x"}'
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    assert sorted(p.name for p in report.iterdir()) == ["gpu01.bench.json"]  # no temporary left


def test_the_content_is_kept_byte_for_byte(tmp_path: Path) -> None:
    content = '{"host": "gpu01", "summary": "é\\u0000 \\n"}'.encode()
    fd = open_dir(tmp_path)
    try:
        action.write_at(fd, "gpu01.audit.json", content)
    finally:
        os.close(fd)
    assert (tmp_path / "gpu01.audit.json").read_bytes() == content


@pytest.mark.parametrize("host", ["", ".", "..", "../gpu01", "racks/gpu01", "gpu\x0001"])
def test_a_host_name_that_cannot_name_a_file_is_refused_naming_it(host: str) -> None:
    with pytest.raises(AnsibleActionFail, match=r"inventory host .* cannot name a file"):
        action.file_name(host, ".audit.json")


@pytest.mark.parametrize("host", ["gpu01", "gpu01.example.org", "10.0.0.7", "node-1_a"])
def test_ordinary_host_names_name_their_file(host: str) -> None:
    assert action.file_name(host, ".audit.json") == host + ".audit.json"
