"""The one way probes run external commands, so tests can feed recorded outputs instead."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from dltune.files import safeio
from dltune.model import InputError
from dltune.probes.watchdog import run_child
from dltune.records import record
from dltune.schema import of, optional, validate

# A fixture tree for `dltune audit --root` keeps the outputs of the commands probes run here.
RECORDINGS_FILE = "dltune-commands.json"
RECORDINGS_SCHEMA = of(
    dict,
    items=of(
        dict,
        keys={
            "returncode": optional(int, minimum=-255, maximum=255),
            "stdout": optional(str),
            "stderr": optional(str),
        },
    ),
)
MAX_RECORDINGS_BYTES = 64 << 20


@record(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class CommandRunner(Protocol):
    def run(self, argv: Sequence[str], timeout: float = 5.0) -> CommandResult: ...


class SubprocessRunner:
    """Runs argv without a shell, with a timeout; a missing program or a timeout becomes data. A late
    command is killed and never waited for (subprocess.run would wait for it after the kill, and a
    command stuck in the kernel, dmesg or blkid on a failing device, would hang the audit there)."""

    def run(self, argv: Sequence[str], timeout: float = 5.0) -> CommandResult:
        args = tuple(argv)
        done = run_child(args, timeout)
        if done.late:
            return CommandResult(args, 124, "", f"{args[0]}: timed out after {timeout:g}s")
        if done.returncode == 127 and not done.stdout and "No such file" in done.stderr:
            return CommandResult(args, 127, "", f"{args[0]}: not found")
        return CommandResult(args, int(done.returncode or 0), done.stdout, done.stderr)


class RecordedRunner:
    """Answers from recorded outputs keyed by the command line joined with spaces.

    A command that was not recorded answers like a program that is not installed (127).
    """

    def __init__(self, recordings: Mapping[str, Mapping[str, object]]) -> None:
        self._recordings = dict(recordings)
        self.calls: list[tuple[str, ...]] = []

    @classmethod
    def from_file(cls, path: str | Path) -> RecordedRunner:
        """The recordings in ``path``; one that cannot be read or has another shape raises InputError
        naming the file (a fixture tree is anyone's to write: a FIFO, deep JSON, a string exit code)."""
        try:
            data = safeio.load_file(path, MAX_RECORDINGS_BYTES)
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from exc
        problems = validate(data, RECORDINGS_SCHEMA)
        if problems:
            raise InputError(f"{path}: not recorded commands: {'; '.join(problems[:3])}")
        return cls(data)

    @classmethod
    def for_fixture_root(cls, root: str | Path) -> RecordedRunner:
        """A fixture tree's recorded commands (``<root>/dltune-commands.json``), or none at all."""
        path = Path(root) / RECORDINGS_FILE
        return cls.from_file(path) if os.path.lexists(path) else cls({})

    def run(self, argv: Sequence[str], timeout: float = 5.0) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        rec = self._recordings.get(" ".join(args))
        if rec is None:
            return CommandResult(args, 127, "", f"{args[0]}: not recorded")
        return CommandResult(
            args,
            int(rec.get("returncode", 0)),  # type: ignore[call-overload]
            str(rec.get("stdout", "")),
            str(rec.get("stderr", "")),
        )
