"""End state of role tmpfs_tmp on real systemd containers (Ubuntu 22.04 and 24.04)."""

from __future__ import annotations

import json
from typing import Any

from conftest import audit_as_user, result

from tests.molecule_support import only_on

FSTAB_LINE = "tmpfs /tmp tmpfs noatime,nosuid,nodev,mode=1777,size=10% 0 0"


def test_fstab_has_exactly_one_tmpfs_line_for_tmp(host: Any) -> None:
    lines = [
        line.split()
        for line in host.file("/etc/fstab").content_string.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    tmp_lines = [fields for fields in lines if len(fields) > 1 and fields[1] == "/tmp"]
    assert tmp_lines == [FSTAB_LINE.split()]


def test_manifest_fragment_records_what_was_applied(host: Any) -> None:
    fragment = host.file("/etc/dltune/expected.d/tmpfs_tmp.json")
    assert fragment.mode == 0o644
    assert host.file("/etc/dltune/expected.d").mode == 0o755
    data = json.loads(fragment.content_string)
    assert data["schema_version"] == 1
    assert data["role"] == "tmpfs_tmp"
    assert data["size"] == "10%"
    assert data["options"] == ["noatime", "nosuid", "nodev", "mode=1777", "size=10%"]
    # No timestamps or run-dependent keys: the fragment changes only when what it describes changes.
    assert set(data) == {
        "schema_version",
        "role",
        "tool_version",
        "mount_point",
        "fstype",
        "size",
        "options",
        "live_mount",
    }


def test_clean_tmp_is_a_live_tmpfs_with_noatime_and_ten_percent(host: Any, mem_total_kb: int) -> None:
    only_on(host, group="tmp_clean", why="busy node: /tmp is left for the next boot")
    mount = host.mount_point("/tmp")
    assert mount.exists
    assert mount.filesystem == "tmpfs"
    assert {"noatime", "nosuid", "nodev"} <= set(mount.options)
    size_kb = int(next(o for o in mount.options if o.startswith("size=")).removesuffix("k")[5:])
    assert abs(size_kb - mem_total_kb // 10) <= max(4, mem_total_kb // 1000)
    assert host.file("/tmp").mode == 0o1777


def test_clean_node_audits_pass_as_an_ordinary_user(host: Any) -> None:
    only_on(host, group="tmp_clean", why="busy node")
    rc, report = audit_as_user(host, "--only", "storage")
    assert rc == 0
    assert report["schema_version"] == 1
    check = result(report, "storage.tmp_tmpfs")
    assert check["status"] == "pass", check
    assert "manifest" in check["evidence"]["judged_against"]
    assert {r["area"] for r in report["results"]} == {"storage"}


def test_busy_tmp_keeps_its_file_and_live_socket(host: Any) -> None:
    only_on(host, group="tmp_busy", why="clean node")
    assert host.check_output("findmnt --noheadings --output FSTYPE --target /tmp") != "tmpfs"
    assert host.file("/tmp/keep-me.txt").content_string == "results of a long job\n"
    assert host.file("/tmp/holder.sock").is_socket
    answer = host.run(
        "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); "
        's.connect("/tmp/holder.sock"); print(s.recv(16).decode().strip())\''
    )
    assert answer.stdout.strip() == "alive", answer.stderr


def test_busy_node_is_marked_for_reboot_and_audit_warns(host: Any) -> None:
    only_on(host, group="tmp_busy", why="clean node")
    assert host.file("/run/reboot-required").exists
    assert "tmpfs_tmp" in host.file("/run/reboot-required.pkgs").content_string.split()
    rc, report = audit_as_user(host)
    assert rc == 0  # warnings do not fail the audit
    assert result(report, "system.reboot_required")["status"] == "warn"
    assert result(report, "system.reboot_required")["evidence"]["requested_by"] == ["tmpfs_tmp"]
    tmp = result(report, "storage.tmp_tmpfs")
    assert tmp["status"] == "warn"
    assert tmp["evidence"]["fstab_matches"] is True
