"""Property-based tests of every parser the audit runs on text from the host: random lines built from
the pieces real files are made of (fields, separators, escapes, Unicode digits, bytes that are not
UTF-8 as surrogateescape gives them), tests.fuzzing.FUZZ_EXAMPLES each. None raises, and where a
parser reports what it could not use, its output accounts for every input line (parsed or reported)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from dltune.checks.gpu import xid
from dltune.probes import nvidia_module_version
from dltune.probes.manifest import check_fragment
from dltune.probes.mounts import parse_fstab, parse_mountinfo
from dltune.probes.mountstats import parse_mountstats
from dltune.probes.network import route_to
from dltune.probes.nvrm import parse_nvrm
from dltune.probes.packages import kernel_log_of
from dltune.probes.runner import RecordedRunner
from dltune.probes.storage import meminfo_kb
from dltune.snapshot import Snapshot, UnparsedLine
from dltune.text import unescape, visible
from tests.fuzzing import FUZZ

# The alphabet of kernel and config files, and what goes wrong in them.
PIECES = st.sampled_from(
    [
        " ",
        "\t",
        "-",
        "/",
        "\\040",
        "\\134",
        "\\",
        "#",
        "=",
        ",",
        ":",
        "0",
        "1",
        "42",
        "²",
        "٣",
        "rw",
        "noatime",
        "ext4",
        "nfs4",
        "tmpfs",
        "UUID=",
        '"',
        "LABEL=x",
        "/data",
        "\udcff",
        "é",
        "[",
        "]",
        "NVRM:",
        "Xid",
        "(PCI:0000:3b:00):",
        "79,",
        "Kernel Module",
        "580.95.05",
        "device",
        "mounted on",
        "with fstype",
        "age:",
        "events:",
        "xprt:",
        "tcp",
        "rdma",
        "MemTotal:",
        "kB",
        "shared:1",
    ]
)
LINES = st.lists(st.lists(PIECES | st.text(max_size=6), max_size=14).map("".join), max_size=25)


def text_of(lines: list[str]) -> str:
    return "\n".join(lines)


@FUZZ
@given(LINES)
def test_mountinfo_accounts_for_every_line(lines: list[str]) -> None:
    unparsed: list[UnparsedLine] = []
    mounts = parse_mountinfo(text_of(lines), unparsed)
    meaningful = [ln for ln in text_of(lines).split("\n") if ln.strip()]
    assert len(mounts) + len(unparsed) == len(meaningful)
    for mount in mounts:
        visible(mount.mount_point).encode("utf-8")


@FUZZ
@given(LINES)
def test_fstab_accounts_for_every_line(lines: list[str]) -> None:
    fstab = parse_fstab(text_of(lines))
    # fstab lines end at "\n" only (a "\r" is part of a line, as libmount reads it).
    blank = " \t\r"  # libmount's blanks (a form feed is part of a field), not Python's str.strip()
    meaningful = [
        ln for ln in text_of(lines).split("\n") if ln.strip(blank) and not ln.lstrip(blank).startswith("#")
    ]
    assert len(fstab.entries) + len(fstab.unparsed) == len(meaningful)


@FUZZ
@given(LINES)
def test_mountstats(lines: list[str]) -> None:
    parse_mountstats(text_of(lines))


@FUZZ
@given(LINES)
def test_meminfo_and_module_version(lines: list[str]) -> None:
    total = meminfo_kb(text_of(lines), "MemTotal")
    assert total is None or total >= 0
    version = nvidia_module_version(text_of(lines))
    assert version is None or version.replace(".", "").isascii()


@FUZZ
@given(LINES)
def test_kernel_log_and_its_judgement(lines: list[str]) -> None:
    log = parse_nvrm(text_of(lines))
    assert len(log.events) <= len(lines)
    snapshot = Snapshot(root="/", kernel_log=kernel_log_of(text_of(lines)))
    for result in xid(snapshot):
        json.dumps(result.to_dict()).encode("utf-8")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=8,
)


@FUZZ
@given(
    JSON_VALUES | st.lists(st.fixed_dictionaries({}, optional={"dev": JSON_VALUES, "prefsrc": JSON_VALUES}))
)
def test_ip_route_get_json(document: object) -> None:
    command = "ip -j route get 192.0.2.1"
    choice = route_to(RecordedRunner({command: {"stdout": json.dumps(document)}}), "192.0.2.1")
    # A route without a device (a blackhole, an unreachable type) is an answer, not an error.
    assert choice.dev is None or isinstance(choice.dev, str)
    assert choice.prefsrc is None or isinstance(choice.prefsrc, str)


@FUZZ
@given(
    st.sampled_from(["tmpfs_tmp", "data_disks", "nvidia_driver", "nfs_multivip", "dl_env", "slurm_tmpdir"]),
    JSON_VALUES,
)
def test_manifest_fragments(role: str, document: object) -> None:
    problems = check_fragment(role, document)
    assert all(isinstance(p, str) for p in problems)


@FUZZ
@given(st.binary(max_size=40))
def test_visible_round_trips_any_bytes(raw: bytes) -> None:
    shown = visible(raw.decode("utf-8", "surrogateescape"))
    shown.encode("utf-8")
    assert unescape(shown) == raw
