"""Which filesystem a path lives on has two homes: the audit's probes/jobenv.fstype_at (over
parse_mountinfo; dltune.staging and the scratch checks use it) and role slurm_tmpdir's filter fstype_of
(which refuses a base directory on a network filesystem before anything changes). Fed the same real
mountinfo files (tests/fixtures/real/mountinfo) and generated mount tables, both must name the same type
for every mount point, a path below each, and paths no mount holds; of several mounts at one point,
the last (on top) counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dltune.probes.jobenv import fstype_at
from dltune.probes.mounts import parse_mountinfo
from tests.conftest import load_role_module
from tests.real_corpus import Sample, samples

filters = load_role_module("plugins/filter/slurm_tmpdir.py")


def paths_of(text: str) -> list[str]:
    points = [m.mount_point for m in parse_mountinfo(text)]
    return ["/", "/nonexistent/deep", *points, *(p.rstrip("/") + "/job/1" for p in points)]


@pytest.mark.parametrize("sample", samples("mountinfo"), ids=str)
def test_real_mountinfo_gives_both_homes_the_same_type(sample: Sample) -> None:
    mounts = parse_mountinfo(sample.body)
    for path in paths_of(sample.body):
        assert fstype_at(path, mounts) == filters.fstype_of(path, sample.body), (sample, path)


def line(index: int, point: str, fstype: str) -> str:
    return f"{index} 1 0:{index} / {point} rw,relatime shared:{index} - {fstype} src{index} rw"


def test_the_mount_on_top_counts() -> None:
    """/tmp on the root disk, then a tmpfs mounted over it: the audit took the hidden one."""
    text = "\n".join([line(1, "/", "ext4"), line(2, "/tmp", "ext4"), line(3, "/tmp", "tmpfs")])
    assert fstype_at("/tmp/x", parse_mountinfo(text)) == filters.fstype_of("/tmp/x", text) == "tmpfs"


POINTS = st.sampled_from(
    ["/", "/tmp", "/scratch", "/scratch/job", "/data", "/mnt/a\\040b", "/mnt/a b", "/t\\011ab"]
)
TYPES = st.sampled_from(["ext4", "xfs", "tmpfs", "nfs4", "lustre", "overlay"])


@settings(max_examples=300)
@given(
    st.lists(st.tuples(POINTS, TYPES), max_size=8),
    st.sampled_from(["/", "/tmp/x", "/scratch/job/1", "/mnt/a b/c", "/t\tab", "/data"]),
)
def test_any_mount_table_gives_both_homes_the_same_type(table: list[tuple[str, str]], path: str) -> None:
    text = "\n".join(line(i + 1, point, fstype) for i, (point, fstype) in enumerate(table))
    assert fstype_at(path, parse_mountinfo(text)) == filters.fstype_of(path, text)
