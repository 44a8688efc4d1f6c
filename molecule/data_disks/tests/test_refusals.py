"""The role refuses unsafe disks and bad input before anything changes: the signatures stay, the
fstab stays, nothing is mounted or formatted. Runs the role again with wrong variables."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import attach_loop, run_role


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
    loop = attach_loop(host, "/var/lib/dltune-test-disks/extra.img")
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
        ([{"device": "/dev/loop0", "mount_point": "data/rel"}], "mount_point=data/rel is refused"),
        ([{"device": "/dev/loop0", "mount_point": "/"}], "mount_point=/ is refused"),
        ([{"device": "/dev/loop0", "mount_point": "/data/x/../y"}], "mount_point=/data/x/../y is refused"),
        (
            [{"device": "/dev/loop0", "mount_point": "/home"}],
            "mount_point=/home is refused: a system directory",
        ),
        ([{"device": "/dev/loop0", "mount_point": "/var/lib/data"}], "mount_point=/var/lib/data is refused"),
        (
            [
                {
                    "device": "/dev/loop0",
                    "mount_point": "/data/x",
                    "options": ["defaults", "noatime", "relatime"],
                }
            ],
            "'noatime' and 'relatime' contradict each other",
        ),
        (
            [{"device": "/dev/loop0", "mount_point": "/data/x", "options": ["defaults", "noatime,ro"]}],
            "the item 'noatime,ro' holds a comma",
        ),
        ([{"device": "/dev/loop0", "mount_point": "/data/x", "fstype": "ntfs"}], "fstype 'ntfs'"),
        (
            [
                {"device": "/dev/loop0", "mount_point": "/data/x"},
                {"device": "/dev/loop1", "mount_point": "/data/x"},
            ],
            "duplicate mount_point",
        ),
        ([{"device": "sdb", "mount_point": "/data/x"}], "device=sdb is refused: not an absolute path"),
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


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"data_disks_device_timeout": "10s,ro"}, "data_disks_device_timeout=10s,ro is invalid"),
        (
            {"data_disks_default_options": ["defaults,relatime", "noatime"]},
            "data_disks_default_options=defaults,relatime,noatime is refused",
        ),
    ],
)
def test_option_lists_are_judged_joined(
    host: Any, disks: dict[str, str], extra: dict[str, Any], named: str
) -> None:
    """An item that smuggles a second option in with a comma is refused, naming the variable."""
    before = state(host, list(disks.values()))
    devices = [{"device": disks["data"], "mount_point": "/data/datasets"}]
    rc, failures, changed = run_role(host, {"data_disks_devices": devices, **extra})
    assert rc != 0 and changed == 0
    assert len(failures) == 1 and named in failures[0], failures
    assert state(host, list(disks.values())) == before


def test_a_mount_point_that_holds_files_is_refused_and_kept(host: Any, disks: dict[str, str]) -> None:
    """A mount would hide what its mount point holds: refused on the node before any change, naming
    the mount point and what is there; the files and every disk stay as they were."""
    host.run_test("mkdir -p /data/occupied && echo keep > /data/occupied/notes.txt")
    try:
        before = state(host, list(disks.values())) + host.check_output("sha256sum /data/occupied/notes.txt")
        rc, failures, changed = run_role(
            host, {"data_disks_devices": [{"device": disks["data"], "mount_point": "/data/occupied"}]}
        )
        assert rc != 0 and changed == 0
        assert len(failures) == 1, failures
        assert (
            "data_disks_devices[0].mount_point=/data/occupied is refused: it is not empty (holds notes.txt)"
            in (failures[0])
        )
        assert (
            state(host, list(disks.values())) + host.check_output("sha256sum /data/occupied/notes.txt")
            == before
        )
    finally:
        host.run("rm -rf /data/occupied")


def test_rollback_refuses_a_mount_point_the_role_did_not_record(host: Any, disks: dict[str, str]) -> None:
    """state absent unmounts only what the manifest recorded mounting: /data/other is not in it."""
    before = state(host, list(disks.values()))
    rc, failures, changed = run_role(
        host,
        {
            "data_disks_state": "absent",
            "data_disks_devices": [{"device": disks["data"], "mount_point": "/data/other"}],
        },
    )
    assert rc != 0 and changed == 0
    assert (
        len(failures) == 1 and "mount_point=/data/other is refused: not what the role recorded" in failures[0]
    )
    assert state(host, list(disks.values())) == before
