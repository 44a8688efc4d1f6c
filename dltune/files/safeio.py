"""Reading what a user or a host could have written, without hanging or crashing on it.

- Files: only regular files are read. A FIFO, a socket or a device is refused before it is opened
  (opening a FIFO waits for a writer; opening some devices acts), and the file is opened with
  ``O_NONBLOCK`` and checked again with ``fstat`` on the open descriptor, so a path swapped in between
  cannot block the reader either. A refusal is an ``OSError`` (``NotRegularFileError``), so every
  caller that treats an unreadable file as data keeps doing so.
- JSON: one loader for every document dltune reads (node reports, manifest fragments, recorded
  commands, tools' JSON output). Nesting is bounded (``MAX_JSON_DEPTH``) by a scan of the text
  *before* parsing, since ``json.loads`` recurses and a deep document would exhaust the stack;
  ``NaN``, ``Infinity`` and numbers that overflow to infinity are refused (JSON has none, Python's
  ``json`` accepts them), and so are integers of more than ``MAX_INT_DIGITS`` digits. Every refusal
  is a ``JsonError`` (a ``ValueError``), so ``except ValueError`` keeps catching bad JSON.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from typing import Any

from dltune.model import InputError

# Deeper than any document dltune writes (an envelope's evidence is a few levels); far below the
# interpreter's recursion limit, which json.loads and every walk of the parsed data would hit.
MAX_JSON_DEPTH = 64
# A counter fits in 20 digits; 100 leaves room, and Pythons before 3.10.7 parse a huge integer in
# quadratic time.
MAX_INT_DIGITS = 100
_CHUNK = 1 << 20
# A JSON string (with its escapes), or one bracket: what the depth scan needs to see.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symbolic link"),
)


class NotRegularFileError(OSError):
    """A path that is not a regular file where one is read (a FIFO, a socket, a device)."""


class JsonError(InputError):
    """JSON that dltune refuses although Python's json would parse it (too deep, not finite)."""


def file_kind(mode: int) -> str:
    """ "a FIFO", "a directory", ... for a stat mode."""
    if stat.S_ISDIR(mode):
        return "a directory"
    return next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")


def _refuse(mode: int, path: str | os.PathLike[str]) -> None:
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(errno.EINVAL, f"not a regular file ({file_kind(mode)})", os.fspath(path))


def read_regular(
    path: str | os.PathLike[str], max_bytes: int | None = None, follow_symlinks: bool = True
) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``max_bytes + 1`` of them when given, so a
    caller can tell a file that is too large). Anything else raises ``OSError``: a directory
    ``IsADirectoryError``, a FIFO, socket or device ``NotRegularFileError`` without being opened
    (without ``follow_symlinks``, a symbolic link too)."""
    _refuse((os.stat if follow_symlinks else os.lstat)(path).st_mode, path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        _refuse(os.fstat(fd).st_mode, path)  # swapped for a FIFO since the stat: still never blocks
        chunks: list[bytes] = []
        size = 0
        while max_bytes is None or size <= max_bytes:
            want = _CHUNK if max_bytes is None else min(_CHUNK, max_bytes + 1 - size)
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def json_depth(text: str, stop_above: int | None = None) -> int:
    """The deepest nesting of arrays and objects in ``text`` (brackets inside strings do not count);
    the scan stops as soon as it passes ``stop_above``. Iterative: any depth is measured."""
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        first = match.group()[0]
        if first in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    break
        elif first in "]}":
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise JsonError(f"{name} is not a JSON number (only finite numbers are)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonError(f"{text[:40]} is not a finite number")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonError(f"an integer of more than {MAX_INT_DIGITS} digits")
    return int(text)


_DECODER = json.JSONDecoder(parse_float=_finite_float, parse_int=_bounded_int, parse_constant=_no_constant)


def _check_depth(text: str, max_depth: int) -> None:
    if json_depth(text, stop_above=max_depth) > max_depth:
        raise JsonError(f"nested deeper than {max_depth} levels")


def loads(text: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` with bounded nesting and finite numbers only; every problem is a ValueError
    (``json.JSONDecodeError`` for bad syntax, ``JsonError`` for what this module refuses)."""
    _check_depth(text, max_depth)
    return _DECODER.decode(text)


def decode_first(text: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The first JSON value at the start of ``text`` (text may follow it), as ``loads`` reads it."""
    _check_depth(text, max_depth)
    return _DECODER.raw_decode(text)[0]


def load_file(path: str | os.PathLike[str], max_bytes: int | None = None, errors: str = "strict") -> Any:
    """The JSON document in the regular file ``path``: ``OSError`` when it cannot be read (a FIFO, a
    device: ``NotRegularFileError``), ``ValueError`` when it is not JSON dltune reads (``JsonError``
    when too large, too deep or not finite; ``UnicodeDecodeError`` for bytes that are not UTF-8 when
    ``errors`` is strict)."""
    raw = read_regular(path, max_bytes)
    if max_bytes is not None and len(raw) > max_bytes:
        raise JsonError(f"larger than {max_bytes} bytes")
    return loads(raw.decode("utf-8", errors=errors))
