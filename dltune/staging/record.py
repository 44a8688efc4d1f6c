"""The record beside a staged dataset (`.<name>.dltune-source.json`): what was staged, from where."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dltune.files.dirfd import (
    UnsafeEntry,
    derived_name,
    opened_dir_checked,
    read_own_file,
    remove_at,
    write_atomically_at,
)
from dltune.staging.model import Entry, StageError

RECORD_SUFFIX = ".dltune-source.json"


def record_path(to: Path, name: str) -> Path:
    """The record beside DIR/<name>: written only once the dataset under that name is complete."""
    return to / derived_name(name, RECORD_SUFFIX)


def describe_source(src: Path, kind: str, entries: list[Entry] | None) -> dict[str, Any]:
    """What identifies a staged source without reading its data: path, kind, and sizes and mtimes
    (of the tree, or of the archive or file itself)."""
    st = src.stat()
    if entries is not None and kind == "dir":
        files = [e for e in entries if e.kind == "file"]
        return {
            "source": os.path.realpath(src),
            "kind": kind,
            "files": len(files),
            "bytes": sum(e.size for e in files),
            "newest_mtime_ns": max((e.mtime_ns for e in files), default=st.st_mtime_ns),
        }
    return {
        "source": os.path.realpath(src),
        "kind": kind,
        "files": 1,
        "bytes": st.st_size,
        "newest_mtime_ns": st.st_mtime_ns,
    }


def parse_record(data: bytes | None) -> dict[str, Any] | None:
    try:
        parsed = json.loads(data.decode("utf-8")) if data else None
    except (UnicodeDecodeError, RecursionError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) else None


def read_record(path: Path) -> dict[str, Any] | None:
    """A record of this user's, None when absent or unreadable; a link or another user's file is
    refused (StageError), never read through."""
    try:
        with opened_dir_checked(str(path.parent)) as parent:
            return parse_record(read_own_file(parent, path.name, str(path)))
    except UnsafeEntry as exc:
        raise StageError(str(exc)) from exc
    except OSError:
        return None


def write_record(path: Path, record: dict[str, Any]) -> None:
    data = (json.dumps(record, sort_keys=True) + "\n").encode()
    try:
        with opened_dir_checked(str(path.parent)) as parent:
            write_atomically_at(parent, path.name, data, str(path))
    except UnsafeEntry as exc:
        raise StageError(str(exc)) from exc
    except OSError as exc:
        raise StageError(f"{path}: cannot write dltune's record ({exc.strerror})") from exc


def completed(identity: dict[str, Any]) -> dict[str, Any]:
    """The record of a dataset staged whole from the source `identity` describes."""
    return {**identity, "complete": True}


def says_complete(record: dict[str, Any] | None) -> bool:
    """Whether a record was written once its dataset was whole (an older dltune also kept the
    partial copy's source there, without the mark)."""
    return record is not None and record.get("complete") is True


def identity_of(record: dict[str, Any]) -> dict[str, Any]:
    """The source as a record describes it, without the mark of completeness."""
    return {key: value for key, value in record.items() if key != "complete"}


def same_source(record: dict[str, Any], now: dict[str, Any]) -> str | None:
    """Why a recorded stage is not of this source as it is now (None when it is)."""
    if record.get("source") != now["source"]:
        return f"holds {record.get('source')}, not {now['source']}"
    changed = [key for key in ("kind", "files", "bytes", "newest_mtime_ns") if record.get(key) != now[key]]
    if changed:
        return f"holds {now['source']} as it was when staged; it has changed since ({', '.join(changed)})"
    return None


def remove_staged(path: Path) -> None:
    """Remove a staged dataset (a tree of any depth, a file), never following a link in it."""
    try:
        with opened_dir_checked(str(path.parent)) as parent:
            remove_at(parent, path.name)
    except FileNotFoundError:
        return
    except UnsafeEntry as exc:
        raise StageError(f"{exc}; nothing was changed") from exc
    except OSError as exc:
        raise StageError(f"{path}: cannot remove it ({exc.strerror}); nothing else was changed") from exc


def partial_record_path(to: Path, name: str) -> Path:
    """What a partial copy is of: written before the partial copy is made, removed after the rename."""
    return to / derived_name(name, ".partial" + RECORD_SUFFIX)
