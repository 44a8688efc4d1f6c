"""The one way probes run external commands, so tests can feed recorded outputs instead."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dltune.probes.watchdog import run_child

# A fixture tree for `dltune audit --root` keeps the outputs of the commands probes run here.
RECORDINGS_FILE = "dltune-commands.json"


@dataclass(frozen=True)
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
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    @classmethod
    def for_fixture_root(cls, root: str | Path) -> RecordedRunner:
        """A fixture tree's recorded commands (``<root>/dltune-commands.json``), or none at all."""
        path = Path(root) / RECORDINGS_FILE
        return cls.from_file(path) if path.is_file() else cls({})

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
