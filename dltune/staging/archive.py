"""Reading tar archives once: extracted with tarfile's data filter, verified by reading to the end."""

from __future__ import annotations

import bz2
import decimal
import errno
import gzip
import hashlib
import lzma
import os
import stat
import tarfile
import zlib
from pathlib import Path
from typing import IO, Any

from dltune.records import field, record
from dltune.staging.compat import UnsupportedPython, require_tar_data_filter
from dltune.staging.copy import Progress, filled_up, is_complete, replacement, sha256_file, write_all
from dltune.staging.model import UNLIMITED, Entry, StageError, Throttle

# What a corrupt or truncated compressed stream raises, by decompressor.
CORRUPT = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile, OSError, ValueError)


class _ThrottledReader:
    """The archive's file as read from its filesystem, its bytes counted by --bwlimit's throttle."""

    def __init__(self, path: Path, throttle: Throttle) -> None:
        self._file = path.open("rb")
        self._throttle = throttle

    def read(self, size: int = -1) -> bytes:
        data = self._file.read(size)
        self._throttle(len(data))
        return data

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> _ThrottledReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _decompressed(src: Path, raw: Any) -> Any:
    """The archive's tar stream read from `raw`, decompressed by a reader whose own check (CRC, xz
    check, zstd checksum) runs when it is read to its end. Closing it leaves `raw` open."""
    name = src.name
    if name.endswith((".tar.zst", ".tar.zstd")):
        try:
            import zstandard
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise StageError(
                f"{src.name}: .tar.zst needs the zstandard package (pip install zstandard)"
            ) from exc
        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False)
    if name.endswith((".tar.gz", ".tgz")):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if name.endswith(".tar.bz2"):
        return bz2.BZ2File(raw, "rb")
    if name.endswith(".tar.xz"):
        return lzma.LZMAFile(raw, "rb")
    return raw


def _mtime_ns(member: tarfile.TarInfo) -> int:
    """A member's mtime to the nanosecond: a pax archive (GNU tar --format=posix, dltune's broadcast
    pack) records it exactly as text, which tarfile's float `mtime` rounds. A value a timestamp
    cannot hold (64-bit nanoseconds) is a corrupt header: ValueError."""
    text = member.pax_headers.get("mtime", "")
    try:
        value = int(decimal.Decimal(text).scaleb(9)) if text else int(member.mtime * 10**9)
    except (decimal.InvalidOperation, ValueError, OverflowError):
        value = MTIME_LIMIT_NS
    if not -MTIME_LIMIT_NS < value < MTIME_LIMIT_NS:
        raise ValueError(f"member {member.name!r}: mtime {text or member.mtime!r} is out of range")
    return value


MTIME_LIMIT_NS = 1 << 63


def _member_path(member: tarfile.TarInfo) -> str:
    """Where the data filter writes a member: relative, without the leading slashes of an absolute name."""
    return member.name.lstrip("/")


def _resume_target(partial: Path, member: tarfile.TarInfo) -> Path | None:
    """The already-extracted file a member would resume onto, or None when it would land outside."""
    target = partial / _member_path(member)
    root = os.path.realpath(partial)
    return target if os.path.realpath(target).startswith(root + os.sep) else None


def _key(relative: str) -> str:
    """One key per place in the extracted tree: `./a`, `a` and `a/` are one file to tar and to us."""
    return os.path.normpath(relative)


def last_of_each(entries: list[Entry]) -> list[Entry]:
    """The tree as tar extracts it: a member appended again (`tar -r` of a file already in the
    archive) is written over the earlier one, so the last member of each name is what stays."""
    last = {_key(entry.relative): entry for entry in entries}
    return list(last.values())


@record
class ArchiveRead:
    entries: list[Entry] = field(default_factory=list)
    copied: int = 0
    skipped: int = 0
    digests: dict[str, str] = field(default_factory=dict)


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path, digest: Any) -> None:
    """A regular member's data into a replacement of `target`, renamed over it once complete."""
    reader = tar.extractfile(member)
    if reader is None:
        raise StageError(f"{member.name}: no data in the archive")
    target.parent.mkdir(parents=True, exist_ok=True)
    with replacement(str(target)) as fd:
        written = 0
        for block in iter(lambda: reader.read(8 << 20), b""):
            if digest is not None:
                digest.update(block)
            write_all(fd, block)
            written += len(block)
        if written != member.size:
            raise StageError(f"{member.name}: the archive ends inside this member (truncated)")
        # The data filter's mode: no setuid/setgid/sticky, no group/other write, owner read/write.
        os.fchmod(fd, member.mode & 0o7777)
        mtime_ns = _mtime_ns(member)
        os.utime(fd, ns=(mtime_ns, mtime_ns))


def _drain(reader: IO[bytes] | None, digest: Any) -> None:
    """Read a member the resume skips (the stream must pass it anyway), digesting it when asked."""
    while reader is not None and (block := reader.read(8 << 20)):
        if digest is not None:
            digest.update(block)


def stage_archive(
    src: Path, partial: Path, advance: Progress, checksum: bool, throttle: Throttle = UNLIMITED
) -> ArchiveRead:
    """One read of the archive: extract each member (data filter), resume over complete files, then read
    the stream to its end so the compressor's check runs."""
    read = ArchiveRead()
    # Names met earlier in this read: an appended member of the same size and mtime is still newer
    # than the one just written, so it is written too (never taken as complete).
    met: set[str] = set()
    raw: Any = _ThrottledReader(src, throttle) if throttle.rate else src.open("rb")
    stream = _decompressed(src, raw)
    try:
        with raw, stream, tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                try:
                    safe = tarfile.data_filter(member, str(partial))
                except tarfile.FilterError as exc:
                    raise StageError(
                        f"{src.name}: unsafe member refused ({exc}); nothing of it was written"
                    ) from exc
                relative = _member_path(safe)
                kind = "file" if safe.isfile() else "dir" if safe.isdir() else "link"
                entry = Entry(relative, kind, safe.size, _mtime_ns(safe), safe.mode)
                read.entries.append(entry)
                again = _key(relative) in met
                met.add(_key(relative))
                if not member.isfile():
                    tar.extract(member, partial, filter="data")
                    continue
                target = _resume_target(partial, member)
                digest = hashlib.sha256() if checksum else None
                if target is not None and not again and is_complete(target, entry):
                    read.skipped += 1
                    _drain(tar.extractfile(member), digest)
                else:
                    _write_member(tar, safe, partial / _member_path(safe), digest)
                    read.copied += member.size
                if digest is not None:
                    read.digests[relative] = digest.hexdigest()
                advance(member.size)
            # The end-of-archive blocks are not the end of the compressed stream: read on, so the
            # decompressor reaches its trailer and checks it.
            while stream.read(1 << 20):
                pass
        read.entries = last_of_each(read.entries)
    except StageError:
        raise
    except (*CORRUPT, KeyError, OverflowError) as exc:  # KeyError: a hard link to a missing member
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise filled_up(exc, str(partial)) from exc
        raise StageError(
            f"{src.name}: not a complete, readable archive ({exc.__class__.__name__}: {exc}); the partial "
            f"tree {partial} is kept and is not taken as staged: fix or fetch the archive again"
        ) from exc
    return read


def verify_against_archive(src: Path, staged: Path, checksum: bool) -> None:
    """An already-staged archive checked again, as asked: the archive is read once more and every
    regular member must be in the staged tree at its size (with `checksum`, at its SHA-256). A name
    the archive holds more than once is checked against its last member, the one tar leaves."""
    members: dict[str, tuple[str, int, str | None]] = {}  # key: (name, size, digest); a non-file: size -1
    with (
        src.open("rb") as raw,
        _decompressed(src, raw) as stream,
        tarfile.open(fileobj=stream, mode="r|") as tar,
    ):
        for member in tar:
            relative = _member_path(member)
            if not member.isfile():
                members[_key(relative)] = (member.name, -1, None)
                continue
            digest = None
            if checksum:
                hashed = hashlib.sha256()
                _drain(tar.extractfile(member), hashed)
                digest = hashed.hexdigest()
            members[_key(relative)] = (member.name, member.size, digest)
    bad: list[str] = []
    for key, (name, size, digest) in members.items():
        if size < 0:
            continue
        path = staged / key
        try:
            st = path.lstat()
        except OSError:
            bad.append(name)
            continue
        whole = stat.S_ISREG(st.st_mode) and st.st_size == size
        if not whole or (digest is not None and digest != sha256_file(path)):
            bad.append(name)
    if bad:
        raise StageError(
            f"verification failed for {len(bad)} file(s) of {staged}, e.g. {bad[:3]}: stage it again "
            "with --replace"
        )


def require_data_filter() -> None:
    """tarfile's `data` filter (Python 3.10.12, 3.11.4, 3.12+) is what makes extraction safe."""
    try:
        require_tar_data_filter()
    except UnsupportedPython as exc:
        raise StageError(str(exc)) from exc
