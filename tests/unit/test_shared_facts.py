"""One fact, two implementations (Ansible runs the role's modules and filters on the controller or the
node with nothing of dltune installed, so they cannot import it): each pair must agree, on real
outputs from tests/fixtures/real/ and on generated ones.

- which packages make up an installed NVIDIA driver (the role holds them; the audit counts them);
- the loaded kernel module's version in /proc/driver/nvidia/version;
- fstab: the lines the role's writer renders are parsed back by the audit to the same entry, and
  the role's reader and the audit's parser agree on which lines libmount reads as entries (the audit
  reports those of them mount(8) cannot mount, a type field holding options, as unparsed).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dltune.probes import nvidia_module_version
from dltune.probes.mounts import parse_fstab
from dltune.probes.packages import DRIVER_PACKAGE
from tests.conftest import load_role_module
from tests.real_corpus import samples

plan = load_role_module("plugins/modules/nvidia_driver_plan.py")
fstab_filters = load_role_module("plugins/filter/data_disks.py")

PACKAGE_NAMES = [
    "nvidia-driver-580-server-open",
    "nvidia-headless-no-dkms-570",
    "libnvidia-compute-580",
    "linux-modules-nvidia-580-server-open-6.8.0-85-generic",
    "linux-objects-nvidia-535-6.5.0-41-generic",
    "linux-signatures-nvidia-6.8.0-85-generic",
    "xserver-xorg-video-nvidia-550",
    "nvidia-fabricmanager-580",
    "nvidia-container-toolkit",
    "libnvidia-container1",
    "cuda-drivers-580",
    "nvidia",
    "python3-nvidia-ml",
    "firmware-nvidia-gsp",
]


def test_the_driver_package_set_is_one_fact() -> None:
    assert plan.DRIVER_PACKAGE.pattern == DRIVER_PACKAGE.pattern
    for name in PACKAGE_NAMES:
        assert bool(plan.DRIVER_PACKAGE.match(name)) == bool(DRIVER_PACKAGE.match(name)), name


@pytest.mark.parametrize("sample", samples("nvidia_version"), ids=str)
def test_the_kernel_module_version_is_read_alike_from_real_files(sample) -> None:  # type: ignore[no-untyped-def]
    audit = nvidia_module_version(sample.body)
    assert audit == plan.loaded_module_version(sample.body)
    assert audit is not None and re.fullmatch(r"[0-9]+(\.[0-9]+)+", audit)


# Any text but NUL and CR (which no fstab line can hold): blanks, tabs, backslashes and newlines the
# writer must escape, and every other Unicode character as it is.
FIELD = (
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r"), max_size=16)
    | st.text(alphabet=st.sampled_from("ab/_-.é\\ \t\n0"), max_size=12)
).filter(lambda t: t.strip(" \t\n") and not t.startswith("#"))
OPTION = st.sampled_from(
    ["defaults", "noatime", "nofail", "x-systemd.device-timeout=5s", "errors=remount-ro"]
)


@settings(max_examples=300)
@given(
    spec=FIELD,
    mount_point=FIELD,
    options=st.lists(OPTION, min_size=1, max_size=4),
    passno=st.integers(0, 2),
)
def test_what_the_roles_writer_renders_the_audit_reads_back(
    spec: str, mount_point: str, options: list[str], passno: int
) -> None:
    entry = {"spec": spec, "mount_point": mount_point, "fstype": "ext4", "options": options, "passno": passno}
    text = fstab_filters.data_disks_fstab("", [entry], [])
    parsed = parse_fstab(text)
    assert parsed.unparsed == ()
    [read] = parsed.entries
    assert (read.spec, read.mount_point, read.fstype, read.options, read.passno) == (
        spec,
        mount_point,
        "ext4",
        tuple(options),
        passno,
    )
    assert fstab_filters.data_disks_fstab_mount_points(text) == [mount_point]


LINE_PIECES = st.sampled_from(
    ["/dev/sda1", " ", "\t", "/data", "ext4", "noatime", "0", "2", "²", "#", "x", "\\040"]
)


def libmount_mount_points(text: str) -> list[str]:
    """The mount points of the lines libmount reads as entries: the audit's entries, and the lines it
    reports though libmount takes them (a type field holding options, which mount(8) cannot mount; the
    role must still find such a line to replace it in place, or mount -a and systemd would see two)."""
    fstab = parse_fstab(text)
    kept = [(u.line_no, u.mount_point) for u in fstab.unparsed if u.mount_point is not None]
    return [point for _, point in sorted([*((e.line_no, e.mount_point) for e in fstab.entries), *kept])]


@pytest.mark.parametrize("sample", samples("fstab"), ids=str)
def test_the_roles_reader_and_the_audit_agree_on_real_fstabs(sample) -> None:  # type: ignore[no-untyped-def]
    assert fstab_filters.data_disks_fstab_mount_points(sample.body) == libmount_mount_points(sample.body)


@settings(max_examples=500)
@given(st.lists(st.lists(LINE_PIECES, max_size=9).map("".join), max_size=6).map("\n".join))
def test_the_roles_reader_and_the_audit_agree_on_odd_lines(text: str) -> None:
    assert fstab_filters.data_disks_fstab_mount_points(text) == libmount_mount_points(text)
