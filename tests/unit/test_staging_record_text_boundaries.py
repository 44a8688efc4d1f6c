"""The record of a staged dataset (what it describes, how it is read, written and removed, never through
a link), the escaping of host text (`visible`) and of its numbers (`decimal`) at every range's edge,
--bwlimit's bounds, and the exact words of the preflight's refusal and of `--plan`. Everything on
tmp_path; `--plan`'s filesystem type is given, not read from the host's mount table."""

from __future__ import annotations

import errno
import math
import os
from pathlib import Path

import pytest

from dltune.staging import Entry, Space, StageError, check_bwlimit, preflight
from dltune.staging import plan as plan_module
from dltune.staging.plan import MAX_BWLIMIT, MIN_BWLIMIT, advice, plan_advice
from dltune.staging.record import (
    describe_source,
    parse_record,
    read_record,
    remove_staged,
    same_source,
    write_record,
)
from dltune.text import MAX_DECIMAL_DIGITS, decimal, unescape, visible

# --- visible ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x00", "\\x00"),
        ("\x1f", "\\x1f"),
        ("\x7f", "\\x7f"),  # DEL: the last ASCII control
        ("\x80", "\\u0080"),  # the first C1 control: \u, since \x80 is the undecodable byte
        ("\x9f", "\\u009f"),  # the last C1 control
        ("\xa0", "\xa0"),  # no-break space: not a control, kept as it is
        ("\udc7f", "\\udc7f"),  # a surrogate just below those surrogateescape makes of bytes
        ("\udc80", "\\x80"),  # byte 0x80 that was not UTF-8
        ("\udcff", "\\xff"),
        ("\udd00", "\\udd00"),  # just above them
        ("\ud800", "\\ud800"),  # the first surrogate
        ("\ud801", "\\ud801"),
        ("\udffe", "\\udffe"),
        ("\udfff", "\\udfff"),  # the last surrogate
        ("\ue000", "\ue000"),  # the first code point after them (private use, not printable): kept
        ("a\\b", "a\\\\b"),
        ("caf\u00e9 \u2028", "caf\u00e9 \u2028"),  # a line separator is not a control character here
    ],
)
def test_visible_escapes_exactly_the_controls_surrogates_and_backslashes(text: str, shown: str) -> None:
    assert visible(text) == shown
    assert visible("[" + text + "]") == "[" + shown + "]"  # among other characters too


def test_visible_round_trips_through_unescape_at_every_edge() -> None:
    raw = b"\x00\x1f\x7f\xc2\x80\xc2\x9f\xc2\xa0\x80\xff\\x"
    assert unescape(visible(os.fsdecode(raw))) == raw


# --- decimal ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("9" * MAX_DECIMAL_DIGITS, int("9" * MAX_DECIMAL_DIGITS)),  # 40 digits: the longest
        ("1" * (MAX_DECIMAL_DIGITS + 1), None),
        ("", None),
        (None, None),
        (" 7", None),
        ("1_0", None),
        ("\u0663", None),
        ("\u00b2", None),
    ],
)
def test_decimal_takes_1_to_40_ascii_digits(text: str | None, value: int | None) -> None:
    assert decimal(text) == value


# --- the record ---------------------------------------------------------------------------------------


def test_a_tree_is_described_by_its_files_only(tmp_path: Path) -> None:
    src = tmp_path / "ds"
    src.mkdir()
    entries = [
        Entry("a", "file", 3, mtime_ns=5),
        Entry("d", "dir", 0, mtime_ns=99),
        Entry("d/b", "file", 4, mtime_ns=7),
        Entry("l", "link", 0, mtime_ns=100),
    ]
    assert describe_source(src, "dir", entries) == {
        "source": str(src.resolve()),
        "kind": "dir",
        "files": 2,
        "bytes": 7,
        "newest_mtime_ns": 7,
    }


@pytest.mark.parametrize("entries", [[], [Entry("d", "dir", 0, mtime_ns=99)]])
def test_a_tree_without_files_is_as_new_as_its_top(tmp_path: Path, entries: list[Entry]) -> None:
    src = tmp_path / "empty"
    src.mkdir()
    os.utime(src, ns=(1_000, 123_456_789))
    described = describe_source(src, "dir", entries)
    assert described["files"] == 0 and described["bytes"] == 0
    assert described["newest_mtime_ns"] == 123_456_789


@pytest.mark.parametrize(("kind", "entries"), [("archive", [Entry("member", "file", 100, mtime_ns=9)]),
                                               ("file", None), ("archive", None)])  # fmt: skip
def test_a_file_or_archive_is_described_by_itself_not_by_its_members(
    tmp_path: Path, kind: str, entries: list[Entry] | None
) -> None:
    src = tmp_path / "ds.tar"
    src.write_bytes(b"x" * 1234)
    os.utime(src, ns=(1_000, 987_654_321))
    assert describe_source(src, kind, entries) == {
        "source": str(src.resolve()),
        "kind": kind,
        "files": 1,
        "bytes": 1234,
        "newest_mtime_ns": 987_654_321,
    }


def test_a_directory_given_without_its_entries_is_described_by_itself(tmp_path: Path) -> None:
    src = tmp_path / "ds"
    src.mkdir()
    described = describe_source(src, "dir", None)
    assert described["files"] == 1 and described["bytes"] == src.stat().st_size


@pytest.mark.parametrize(
    ("data", "parsed"),
    [
        (b'{"source": "/s"}', {"source": "/s"}),
        (b"{}", {}),
        (b"[1, 2]", None),
        (b"1", None),
        (b'"text"', None),
        (b"null", None),
        (b"", None),
        (None, None),
        (b"\xff{}", None),
        (b"{", None),
        (b"[" * 100_000, None),
    ],
)
def test_only_a_json_object_is_a_record(data: bytes | None, parsed: dict[str, object] | None) -> None:
    assert parse_record(data) == parsed


def test_a_record_is_written_sorted_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / ".ds.dltune-source.json"
    write_record(path, {"source": "/s", "kind": "dir", "complete": True})
    assert path.read_bytes() == b'{"complete": true, "kind": "dir", "source": "/s"}\n'
    assert read_record(path) == {"source": "/s", "kind": "dir", "complete": True}


def test_an_absent_or_unreadable_record_is_none(tmp_path: Path) -> None:
    assert read_record(tmp_path / ".absent.dltune-source.json") is None
    assert read_record(tmp_path / "no-such-dir" / ".ds.dltune-source.json") is None
    garbage = tmp_path / ".ds.dltune-source.json"
    garbage.write_bytes(b"[1]")
    assert read_record(garbage) is None


def test_a_link_planted_as_the_record_is_refused_by_name_never_read_or_written_through(
    tmp_path: Path,
) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text('{"source": "/planted"}')
    path = tmp_path / ".ds.dltune-source.json"
    path.symlink_to(target)
    refusal = f"{path} is a symbolic link; dltune never makes one there: remove it"
    with pytest.raises(StageError) as read:
        read_record(path)
    assert str(read.value) == refusal
    with pytest.raises(StageError) as written:
        write_record(path, {"source": "/s"})
    assert str(written.value) == refusal
    assert target.read_text() == '{"source": "/planted"}'


def test_a_directory_in_the_record_s_place_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / ".ds.dltune-source.json"
    path.mkdir()
    with pytest.raises(StageError) as written:
        write_record(path, {"source": "/s"})
    assert str(written.value) == f"{path} is not a regular file as dltune makes it: remove it"


def test_a_record_that_cannot_be_written_says_where_and_why(tmp_path: Path) -> None:
    path = tmp_path / "no-such-dir" / ".ds.dltune-source.json"
    with pytest.raises(StageError) as refused:
        write_record(path, {"source": "/s"})
    assert str(refused.value) == f"{path}: cannot write dltune's record ({os.strerror(errno.ENOENT)})"


def test_every_changed_figure_of_the_source_is_named() -> None:
    record = {"source": "/s", "kind": "dir", "files": 3, "bytes": 10, "newest_mtime_ns": 1}
    assert same_source(record, {**record, "files": 4, "bytes": 11}) == (
        "holds /s as it was when staged; it has changed since (files, bytes)"
    )
    assert same_source(record, {**record, "source": "/t"}) == "holds /s, not /t"
    assert same_source(record, dict(record)) is None


def test_remove_staged_removes_a_tree_or_a_file_and_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("kept")
    staged = tmp_path / "to" / "staged-ds-tree"
    (staged / "a" / "b").mkdir(parents=True)
    (staged / "a" / "b" / "f").write_text("x")
    (staged / "link").symlink_to(outside)
    remove_staged(staged)
    assert not os.path.lexists(staged) and (outside / "keep").read_text() == "kept"
    single = tmp_path / "to" / "staged-ds-file"
    single.write_text("y")
    remove_staged(single)
    assert not os.path.lexists(single) and (tmp_path / "to").is_dir()


def test_remove_staged_of_nothing_is_nothing(tmp_path: Path) -> None:
    remove_staged(tmp_path / "staged-ds-absent")
    remove_staged(tmp_path / "no-such-dir" / "staged-ds-absent")
    assert list(tmp_path.iterdir()) == []


def test_remove_staged_that_fails_says_where_and_why(tmp_path: Path) -> None:
    parent = tmp_path / "a-file"
    parent.write_text("not a directory")
    path = parent / "staged-ds"
    with pytest.raises(StageError) as refused:
        remove_staged(path)
    assert str(refused.value) == (
        f"{path}: cannot remove it ({os.strerror(errno.ENOTDIR)}); nothing else was changed"
    )


# --- --bwlimit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bwlimit", [None, 0.0, MIN_BWLIMIT, 0.5, 1.0, 250.0, MAX_BWLIMIT])
def test_bwlimit_0_or_from_a_kilobyte_to_a_terabyte_per_second_is_taken(bwlimit: float | None) -> None:
    check_bwlimit(bwlimit)


@pytest.mark.parametrize(
    "bwlimit",
    [
        -0.5,
        math.nextafter(0.0, -1.0),
        math.nextafter(0.0, 1.0),
        1e-300,
        math.nextafter(MIN_BWLIMIT, 0.0),
        math.nextafter(MAX_BWLIMIT, math.inf),
        math.inf,
        math.nan,
    ],
)
def test_bwlimit_outside_the_range_is_refused(bwlimit: float) -> None:
    """Above 0 and below a kilobyte per second, a read would wait for centuries (1e-300 MB/s once
    overflowed the clock: an internal error after the partial copy was made)."""
    with pytest.raises(StageError) as refused:
        check_bwlimit(bwlimit)
    assert str(refused.value) == f"--bwlimit {bwlimit}: give 0 (no limit) or MB/s from 0.001 to 1000000"


# --- the preflight's words ----------------------------------------------------------------------------

DEST = Path("/scratch")
AFTER = ". Free space, or stage elsewhere (--to)."


def refusal(entries: list[Entry], space: Space) -> str:
    with pytest.raises(StageError) as refused:
        preflight(entries, 0, 0, space, DEST)
    return str(refused.value)


def test_the_preflight_shows_sizes_in_the_unit_a_person_reads() -> None:
    """Issue 46: 5 MB against 4 MB read "0.01 GB would come out of RAM (0.00 GB available)"; now each
    size in three digits of its own unit (byte blocks here, so that nothing is rounded up). Where only
    the reserve kept for other jobs is missing, the refusal names it: "needs 5 MB, 5 MB free" alone
    would read as room."""
    five_mb = [Entry("f", "file", 5_000_000)]
    assert refusal(five_mb, Space(5_000_000, 100, "ext4", block_size=1)) == (
        "not enough room, nothing copied: needs 5 MB in 1-byte blocks and 200 kB kept free, 5 MB free at "
        "/scratch" + AFTER
    )
    assert refusal(five_mb, Space(10**12, 100, "tmpfs", mem_available=4_000_000, block_size=1)) == (
        "not enough room, nothing copied: /scratch is a tmpfs: its 5 MB would come out of RAM "
        "(4 MB available)" + AFTER
    )
    six_mb = [Entry("f", "file", 6_000_000)]
    assert refusal(six_mb, Space(10**12, 100, "tmpfs", mem_available=5_000_000, block_size=1)) == (
        "not enough room, nothing copied: /scratch is a tmpfs: its 6 MB would come out of RAM "
        "(5 MB available)" + AFTER
    )


def test_every_shortage_is_named_in_one_sentence() -> None:
    entries = [Entry("a", "file", 1), Entry("b", "file", 1)]
    assert refusal(entries, Space(4096, 1, "tmpfs", mem_available=0)) == (
        "not enough room, nothing copied: needs 8.19 kB in 4096-byte blocks, 4.1 kB free at /scratch; "
        "needs 2 inodes, 1 free; /scratch is a tmpfs: its 8.19 kB would come out of RAM (0 B available)"
        + AFTER
    )


# --- --plan's words -----------------------------------------------------------------------------------

PACK = (
    "pack: many small files; keep them as one archive (tar or tar.zst) on the shared filesystem and stage "
    "the archive: each node then extracts it once instead of opening every file over NFS"
)
MEMORY = "memory: up to ~10 GB fits in RAM; stage it (or load it into memory) at job start"
STAGE = "stage: copy it to $SLURM_TMPDIR at job start (`dltune stage SRC`)"
SHARED = "shared: over ~100 GB, read it from the shared filesystem (spread over the VIP mounts)"


def broadcast(nodes: int, read: str, once: str) -> str:
    return (
        f"broadcast: staged per node, {nodes} nodes read {read} from the shared filesystem at job start; "
        f"`dltune stage --broadcast SRC` in the batch script reads {once} once and Slurm's sbcast fans it "
        "out (each node needs room for twice the dataset while it lands)"
    )


def test_plan_lines_word_for_word() -> None:
    assert advice("/d", 11_000 * 1000, 11_000, "nfs4", 1, True) == [
        "/d: 11 MB in 11000 files, mean 1 kB, on nfs4",
        PACK,
        MEMORY,
    ]
    assert advice("/d", 50 * 10**9, 10, "nfs4", 1, True)[1:] == [STAGE]
    assert advice("/d", 500 * 10**9, 10, "nfs4", 4, True)[1:] == [SHARED]


def test_plan_sizes_read_in_their_own_unit() -> None:
    """Issue 46: 5 MB read "0.01 GB ..., mean 5000.0 kB" and 2.5 MB "reads 0.00 GB once": each size
    now in three digits of its own unit (the first line, each node's read, the broadcast's one read);
    one file has no mean, and an empty source is said so, with nothing to advise."""
    assert advice("/d", 5_000_000, 1, "ext4", 2, False) == [
        "/d: 5 MB in 1 file, on ext4",
        MEMORY,
        broadcast(2, "10 MB", "5 MB"),
    ]
    assert advice("/d", 2_500_000, 1, "ext4", 2, False)[2] == broadcast(2, "5 MB", "2.5 MB")
    assert advice("/d", 0, 0, "ext4", 2, True) == ["/d: no file in it, on ext4: nothing to stage"]


@pytest.fixture
def fstypes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """`--plan` reads the filesystem type from the host's mount table: given here, and the path asked."""
    asked: list[Path] = []

    def fstype_of(path: Path) -> str:
        asked.append(path)
        return "fakefs"

    monkeypatch.setattr(plan_module, "fstype_of", fstype_of)
    return asked


def test_plan_of_a_directory_counts_its_files(tmp_path: Path, fstypes: list[Path]) -> None:
    src = tmp_path / "ds"
    (src / "sub").mkdir(parents=True)
    (src / "a").write_bytes(b"x" * 3000)
    (src / "sub" / "b").write_bytes(b"x" * 5000)
    (src / "link").symlink_to("a")
    assert plan_advice(src) == [f"{src}: 8 kB in 2 files, mean 4 kB, on fakefs", MEMORY]
    assert fstypes == [src]
    assert plan_advice(src, 3)[-1] == broadcast(3, "24 kB", "8 kB")


def test_plan_of_a_file_is_one_file(tmp_path: Path, fstypes: list[Path]) -> None:
    src = tmp_path / "ds.tar"
    src.write_bytes(b"x" * 7000)
    assert plan_advice(src) == [f"{src}: 7 kB in 1 file, on fakefs", MEMORY]
    assert fstypes == [src]
    assert plan_advice(src, 2)[-1] == broadcast(2, "14 kB", "7 kB")


def test_plan_advises_packing_a_directory_never_a_single_file(
    tmp_path: Path, fstypes: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the limit lowered to none, one small file is "many": a directory of it is packed, an
    archive (a file already) never is."""
    monkeypatch.setattr(plan_module, "PACK_FILES", 0)
    src = tmp_path / "ds"
    src.mkdir()
    (src / "a").write_bytes(b"x")
    assert PACK in plan_advice(src)
    single = tmp_path / "ds.tar"
    single.write_bytes(b"x")
    assert PACK not in plan_advice(single)
