"""Deadlines for probes that can block in the kernel (NVML on a wedged GPU, statfs on a dead NFS
server): they run in a child process that is killed when late and then never waited on, because a
task stuck in uninterruptible sleep cannot be reaped and would hold the audit (and Slurm's
HealthCheckProgram, and the audit timer) with it.

``Deadline`` is the whole audit's budget (``dltune audit --timeout``): every child gets at most what
is left, and a probe that could not finish is recorded by name so the audit can say what it missed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dltune.records import field, record
from dltune.text import decimal

if TYPE_CHECKING:
    from dltune.snapshot import StatFs

# argv marker of dltune's probe children, so a later audit can recognise one still stuck.
CHILD_MARKER = "--dltune-probe-child"
# statvfs fields through coreutils' stat: fundamental block size, blocks, blocks free to users,
# inodes, free inodes.
STATFS_FORMAT = "%S %b %a %c %d"


@record
class Deadline:
    """The audit's whole budget; probes ask what is left and report what they could not finish."""

    seconds: float | None = None
    start: float = field(default_factory=time.monotonic)
    missed: dict[str, str] = field(default_factory=dict)

    def remaining(self) -> float | None:
        if self.seconds is None:
            return None
        return max(0.0, self.seconds - (time.monotonic() - self.start))

    def limit(self, timeout: float) -> float:
        left = self.remaining()
        return timeout if left is None else min(timeout, left)

    def expired(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0.0


@record(frozen=True)
class ChildResult:
    returncode: int | None  # None: killed at the deadline
    stdout: str
    stderr: str
    seconds: float

    @property
    def late(self) -> bool:
        return self.returncode is None


def _abandon(child: subprocess.Popen[str]) -> None:
    """Kill a late child and its group, then let it go: never wait for it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    for stream in (child.stdout, child.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _spawn(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A child in a session of its own (so its whole group can be killed), text pipes, no stdin."""
    return subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
        env=env,
    )


def run_child(argv: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> ChildResult:
    """Run argv with a deadline. A child that is late is killed (SIGKILL: it may ignore SIGTERM) and
    abandoned; a program that does not exist answers like one that failed (127)."""
    start = time.monotonic()
    try:
        child = _spawn(argv, env)
    except OSError as exc:
        return ChildResult(127, "", f"{argv[0]}: {exc.strerror or exc}", 0.0)
    try:
        out, err = child.communicate(timeout=max(timeout, 0.001))
    except subprocess.TimeoutExpired:
        _abandon(child)
        return ChildResult(None, "", "", time.monotonic() - start)
    return ChildResult(child.returncode, out, err, time.monotonic() - start)


def statfs_many(paths: Sequence[str], timeout: float) -> dict[str, StatFs | str]:
    """statfs of each path in a child of its own, all at once (a dead server costs one timeout, not
    one per path); a path that does not answer in time maps to the reason instead."""
    from dltune.snapshot import StatFs

    start = time.monotonic()
    children: dict[str, subprocess.Popen[str] | str] = {}
    for path in paths:
        try:
            children[path] = _spawn(["stat", "--file-system", "--format", STATFS_FORMAT, "--", path])
        except OSError as exc:
            children[path] = f"stat could not run: {exc.strerror or exc}"
    found: dict[str, StatFs | str] = {}
    for path, child in children.items():
        if isinstance(child, str):
            found[path] = child
            continue
        left = max(0.001, timeout - (time.monotonic() - start))
        try:
            out, err = child.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            _abandon(child)
            found[path] = f"statfs did not answer within {timeout:g} s"
            continue
        fields = [decimal(f) for f in out.split()]
        if child.returncode != 0 or len(fields) != 5 or None in fields:
            found[path] = f"statfs failed: {err.strip() or out.strip() or child.returncode}"
            continue
        block, blocks, available, inodes, free_inodes = (f or 0 for f in fields)
        found[path] = StatFs(blocks * block, available * block, inodes, free_inodes)
    return found


def stuck_children(kind: str, older_than: float, proc: Path = Path("/proc")) -> list[int]:
    """PIDs of dltune probe children of ``kind`` (e.g. "nvml") that have run for longer than
    ``older_than`` seconds: left behind, stuck, by an earlier audit. Read-only (/proc only)."""
    try:
        uptime = float((proc / "uptime").read_text().split()[0])
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return []
    found = []
    for pid, cmdline in process_cmdlines(proc):
        argv = cmdline.split(b"\0")
        if CHILD_MARKER.encode() not in argv or kind.encode() not in argv:
            continue
        try:
            stat_fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
            start_ticks = decimal(stat_fields[19])  # field 22 of /proc/PID/stat: starttime
        except (OSError, ValueError, IndexError):
            continue
        if start_ticks is not None and uptime - start_ticks / ticks > older_than:
            found.append(pid)
    return sorted(found)


def process_cmdlines(proc: Path = Path("/proc")) -> Iterator[tuple[int, bytes]]:
    """(pid, raw command line) of every other process that can still be read."""
    for entry in proc.iterdir() if proc.is_dir() else []:
        pid = decimal(entry.name)
        if pid is None or pid == os.getpid():
            continue
        try:
            yield pid, (entry / "cmdline").read_bytes()
        except OSError:
            continue
