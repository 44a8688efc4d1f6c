"""End state of role data_disks on real loop-device disks (ext4) in a systemd container."""

from __future__ import annotations

import json
from typing import Any

from conftest import audit_as_user


def fstab_entries(host: Any) -> list[list[str]]:
    return [
        line.split()
        for line in host.file("/etc/fstab").content_string.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def uuid_of(host: Any, device: str) -> str:
    return host.check_output(f"blkid --probe --output value --match-tag UUID {device}")


def test_blank_disk_formatted_in_fstab_by_uuid_and_mounted_noatime(host: Any, disks: dict[str, str]) -> None:
    mount = host.mount_point("/data/blank")
    assert mount.filesystem == "ext4"
    assert "noatime" in mount.options
    assert host.check_output("findmnt --noheadings --output SOURCE /data/blank") == disks["blank"]
    uuid = uuid_of(host, disks["blank"])
    line = [f for f in fstab_entries(host) if f[1] == "/data/blank"]
    assert line == [
        [
            f"UUID={uuid}",
            "/data/blank",
            "ext4",
            "defaults,noatime,errors=remount-ro,nofail,x-systemd.device-timeout=10s",
            "0",
            "2",
        ]
    ]
    root = host.file("/data/blank")
    assert root.user == "nobody" and root.mode == 0o775


def test_disk_holding_files_is_not_formatted_and_files_are_byte_identical(
    host: Any, disks: dict[str, str]
) -> None:
    assert "noatime" in host.mount_point("/data/datasets").options
    check = host.run("cd /data/datasets && sha256sum --check --quiet /etc/dltune-test/data.sha256")
    assert check.rc == 0, check.stdout + check.stderr
    assert host.check_output("wc -l < /etc/dltune-test/data.sha256") == "300"


def test_disk_mounted_relatime_was_remounted_live_not_unmounted(host: Any) -> None:
    assert "noatime" in host.mount_point("/data/relatime").options
    assert host.file("/data/relatime/still-here.txt").content_string == "written before the role ran\n"
    mount_id = host.check_output("awk '$5 == \"/data/relatime\" {print $1}' /proc/self/mountinfo")
    # A remount keeps the mount's id; an unmount and mount would give it a new one.
    assert mount_id == host.file("/etc/dltune-test/relatime.mount-id").content_string.strip()


def test_fstab_keeps_comments_and_foreign_lines_and_adds_one_line_per_disk(host: Any) -> None:
    original = host.file("/etc/dltune-test/fstab.orig").content_string.splitlines()
    now = host.file("/etc/fstab").content_string.splitlines()
    edited = [ln.replace("relatime,size=16m", "size=16m,noatime") for ln in original]
    assert now[: len(edited)] == edited
    added = now[len(edited) :]
    assert sorted(ln.split()[1] for ln in added) == ["/data/blank", "/data/datasets", "/data/relatime"]
    points = [f[1] for f in fstab_entries(host)]
    assert all(points.count(mp) == 1 for mp in ("/data/blank", "/data/datasets", "/data/relatime"))
    assert host.run("ls /etc/fstab.*~ 2>/dev/null || ls /etc/fstab.*@*~").rc == 0  # backup kept


def test_system_mount_got_noatime_live(host: Any) -> None:
    assert "noatime" in host.mount_point("/scratch-sys").options


def test_manifest_lists_the_disks_by_uuid(host: Any, disks: dict[str, str]) -> None:
    data = json.loads(host.file("/etc/dltune/expected.d/data_disks.json").content_string)
    assert data["role"] == "data_disks" and data["system_noatime"] == ["/scratch-sys"]
    by_mp = {d["mount_point"]: d for d in data["disks"]}
    assert set(by_mp) == {"/data/blank", "/data/datasets", "/data/relatime"}
    assert by_mp["/data/blank"]["uuid"] == uuid_of(host, disks["blank"])
    assert "noatime" in by_mp["/data/datasets"]["options"]


def test_audit_passes_then_fails_with_the_remedy_after_a_manual_relatime(host: Any) -> None:
    rc, results = audit_as_user(host)
    assert rc == 0, results
    for mp in ("/data/blank", "/data/datasets", "/data/relatime", "/scratch-sys"):
        assert results[("storage.data_noatime", mp)]["status"] == "pass"
    # What an admin's `mount -o remount,relatime` does when fstab does not add noatime back.
    host.run_test("mount -o remount,relatime --options-source disable /data/datasets")
    try:
        rc, results = audit_as_user(host)
        finding = results[("storage.data_noatime", "/data/datasets")]
        assert rc == 1
        assert finding["status"] == "fail" and "relatime" in finding["summary"]
        assert "data_disks" in finding["remedy"]
    finally:
        host.run_test("mount -o remount,noatime /data/datasets")
