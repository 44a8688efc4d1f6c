"""Staging's judgements before anything is copied, at their boundaries: the preflight (blocks,
the reserve, inodes, RAM on a tmpfs) and `--plan`'s advice (pack, memory, stage, shared, broadcast).
Pure functions on numbers: the end-to-end refusals on real filesystems are in test_stage.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from dltune.model import human_size
from dltune.staging import Entry, Space, StageError
from dltune.staging.plan import MEMORY_GB, PACK_FILES, PACK_MEAN_BYTES, STAGE_GB, advice, allocated, preflight

DEST = Path("/scratch")


def fits(entries: list[Entry], space: Space, done_bytes: int = 0, done_files: int = 0) -> bool:
    try:
        preflight(entries, done_bytes, done_files, space, DEST)
    except StageError as exc:
        assert str(exc).startswith("not enough room, nothing copied: ") and "(--to)" in str(exc)
        return False
    return True


def one_byte_files(count: int) -> list[Entry]:
    return [Entry(f"f{i}", "file", 1) for i in range(count)]


@pytest.mark.parametrize(("size", "block", "taken"), [(0, 4096, 0), (1, 4096, 4096), (4096, 4096, 4096),
                                                      (4097, 4096, 8192), (5, 1, 5)])  # fmt: skip
def test_a_file_takes_whole_blocks(size: int, block: int, taken: int) -> None:
    assert allocated(size, block) == taken


@pytest.mark.parametrize(("free", "ok"), [(4262, False), (4263, True)])
def test_a_two_percent_reserve_is_kept_free(free: int, ok: bool) -> None:
    """One byte takes a 4096-byte block; 2% of (free + needed) stays free: 4263 bytes are the least
    that hold it (4263 - int(8359 * 0.02) = 4096)."""
    assert fits(one_byte_files(1), Space(free, 100, "ext4")) is ok


def test_directories_take_a_block_each_and_completed_files_are_not_counted_again() -> None:
    roomy = Space(10**9, 100, "ext4")
    tight = Space(4263, 100, "ext4")
    assert fits([Entry("d", "dir", 0)], tight) and not fits(
        [Entry("d", "dir", 0), Entry("e", "dir", 0)], tight
    )
    assert not fits(one_byte_files(2), tight)
    assert fits(one_byte_files(2), tight, done_bytes=4096, done_files=1)
    assert fits([Entry("link", "link", 0)], tight)  # a link takes an inode, no block
    assert fits(one_byte_files(3), roomy)


@pytest.mark.parametrize(("free_inodes", "ok"), [(3, True), (2, False), (0, True)])
def test_inodes_are_counted_unless_the_filesystem_reports_none(free_inodes: int, ok: bool) -> None:
    """0 free inodes is what btrfs and some network filesystems report: no limit, not none left."""
    assert fits(one_byte_files(3), Space(10**9, free_inodes, "ext4")) is ok
    assert fits(one_byte_files(3), Space(10**9, 2, "ext4"), done_bytes=4096, done_files=1)


@pytest.mark.parametrize(("available", "ok"), [(8192, True), (8191, False), (None, True)])
def test_a_tmpfs_also_needs_the_ram(available: int | None, ok: bool) -> None:
    assert fits(one_byte_files(2), Space(10**9, 100, "tmpfs", mem_available=available)) is ok


def test_every_shortage_is_named_in_one_refusal() -> None:
    with pytest.raises(StageError) as refused:
        preflight(one_byte_files(3), 0, 0, Space(100, 2, "tmpfs", mem_available=10), DEST)
    message = str(refused.value)
    assert "needs 12.3 kB in 4096-byte blocks, 100 B free at /scratch" in message
    assert "needs 3 inodes, 2 free" in message and "is a tmpfs" in message and "(10 B available)" in message


def test_a_block_size_of_zero_counts_bytes() -> None:
    assert fits(one_byte_files(3), Space(3, 100, "fuse", block_size=0))  # 2% of 6 bytes rounds to 0
    assert not fits(one_byte_files(4), Space(3, 100, "fuse", block_size=0))


# --- --plan ---------------------------------------------------------------------------------------------

GB = 10**9


def kinds(lines: list[str]) -> list[str]:
    return [line.split(":", 1)[0] for line in lines[1:]]


@pytest.mark.parametrize(
    ("count", "size", "directory", "packs"),
    [
        (PACK_FILES + 1, (PACK_FILES + 1) * (PACK_MEAN_BYTES - 1), True, True),
        (PACK_FILES, PACK_FILES * (PACK_MEAN_BYTES - 1), True, False),  # not more than the limit
        (PACK_FILES + 1, (PACK_FILES + 1) * PACK_MEAN_BYTES, True, False),  # files not small
        (PACK_FILES + 1, (PACK_FILES + 1) * (PACK_MEAN_BYTES - 1), False, False),  # one archive already
    ],
)
def test_pack_is_advised_for_many_small_files_in_a_directory(
    count: int, size: int, directory: bool, packs: bool
) -> None:
    assert ("pack" in kinds(advice("/d", size, count, "nfs4", 1, directory))) is packs


@pytest.mark.parametrize(
    ("size", "where"),
    [(0, "memory"), (MEMORY_GB * GB, "memory"), (MEMORY_GB * GB + 1, "stage"), (STAGE_GB * GB, "stage"),
     (STAGE_GB * GB + 1, "shared")],
)  # fmt: skip
def test_memory_stage_or_shared_by_size(size: int, where: str) -> None:
    assert kinds(advice("/d", size, 10, "nfs4", 1, True)) == [where]


@pytest.mark.parametrize(
    ("nodes", "size", "broadcast"),
    [(2, STAGE_GB * GB, True), (1, GB, False), (2, STAGE_GB * GB + 1, False), (0, GB, False)],
)
def test_broadcast_for_a_job_of_several_nodes_when_the_dataset_is_staged(
    nodes: int, size: int, broadcast: bool
) -> None:
    lines = advice("/d", size, 10, "nfs4", nodes, True)
    assert ("broadcast" in kinds(lines)) is broadcast
    if broadcast:
        assert f"{nodes} nodes read {human_size(nodes * size)} from" in lines[-1]
        assert f"reads {human_size(size)} once" in lines[-1]


def test_the_first_line_says_what_was_read() -> None:
    assert advice("/shared/ds", 3 * GB, 3000, "nfs4", 1, True)[0] == (
        "/shared/ds: 3 GB in 3000 files, mean 1 MB, on nfs4"
    )
    assert advice("/shared/empty", 0, 0, "ext4", 1, True) == [
        "/shared/empty: no file in it, on ext4: nothing to stage"
    ]
