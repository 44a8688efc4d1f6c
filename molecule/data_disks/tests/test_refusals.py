"""The role refuses unsafe disks and bad input before anything changes: the signatures stay, the
fstab stays, nothing is mounted or formatted. Runs the role again with wrong variables."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import run_role


def state(host: Any, devices: list[str]) -> str:
    return host.check_output(
        "sha256sum /etc/fstab /etc/dltune/expected.d/data_disks.json; "
        "findmnt --list --noheadings -o TARGET,OPTIONS; "
        + "; ".join(f"blkid --probe --output export {d}; wipefs --no-act --json {d}" for d in devices)
    )


@pytest.mark.parametrize(
    ("disk", "signature"), [("gpt", "gpt"), ("lvm", "LVM2_member"), ("md", "linux_raid_member")]
)
def test_disk_with_a_signature_but_no_filesystem_is_never_formatted(
    host: Any, disks: dict[str, str], disk: str, signature: str
) -> None:
    before = state(host, [disks[disk]])
    rc, failures, changed = run_role(
        host,
        {
            "data_disks_format_allowed": True,
            "data_disks_devices": [{"device": disks[disk], "mount_point": f"/data/{disk}"}],
        },
    )
    assert rc != 0
    assert len(failures) == 1 and signature in failures[0] and "refusing to format" in failures[0], failures
    assert changed == 0
    assert state(host, [disks[disk]]) == before
    assert not host.file(f"/data/{disk}").exists


def test_blank_disk_without_permission_is_left_blank(host: Any, disks: dict[str, str]) -> None:
    host.run_test("truncate --size=16M /var/lib/dltune-test-disks/extra.img")
    loop = host.check_output("losetup --find --show /var/lib/dltune-test-disks/extra.img")
    try:
        rc, failures, changed = run_role(
            host,
            {
                "data_disks_devices": [{"device": loop, "mount_point": "/data/extra"}],
            },
        )
        assert rc != 0 and "data_disks_format_allowed" in failures[0] and changed == 0
        assert host.run(f"blkid --probe {loop}").rc == 2  # still nothing on it
    finally:
        host.run(f"losetup --detach {loop}")


@pytest.mark.parametrize(
    ("devices", "named"),
    [
        ([{"device": "/dev/loop0", "mount_point": "data/rel"}], "mount_point 'data/rel'"),
        ([{"device": "/dev/loop0", "mount_point": "/"}], "mount_point '/'"),
        ([{"device": "/dev/loop0", "mount_point": "/data/x/../y"}], "mount_point '/data/x/../y'"),
        ([{"device": "/dev/loop0", "mount_point": "/data/x", "fstype": "ntfs"}], "fstype 'ntfs'"),
        (
            [
                {"device": "/dev/loop0", "mount_point": "/data/x"},
                {"device": "/dev/loop1", "mount_point": "/data/x"},
            ],
            "duplicate mount_point",
        ),
        ([{"device": "sdb", "mount_point": "/data/x"}], "device 'sdb'"),
        (
            [{"device": "/dev/loop0", "mount_point": "/data/x", "options": ["defaults", "relatime"]}],
            "noatime",
        ),
    ],
)
def test_bad_input_fails_naming_the_variable_and_changes_nothing(
    host: Any, disks: dict[str, str], devices: list[dict[str, Any]], named: str
) -> None:
    before = state(host, list(disks.values()))
    rc, failures, changed = run_role(host, {"data_disks_format_allowed": True, "data_disks_devices": devices})
    assert rc != 0 and changed == 0
    assert len(failures) == 1 and "data_disks_devices" in failures[0] and named in failures[0], failures
    assert state(host, list(disks.values())) == before
