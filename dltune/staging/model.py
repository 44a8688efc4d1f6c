"""What staging passes around: the error, an entry of a scanned tree, the summary, the bandwidth throttle."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from dltune.model import counted, human_size
from dltune.records import field, record

ARCHIVE_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tar.zstd", ".tgz", ".tar")


class StageError(Exception):
    """Staging refused or failed; the message says why and what to do."""


@record
class Entry:
    relative: str
    kind: str  # "file", "dir", "link"
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0o644
    target: str = ""
    inode: int = field(default=0, compare=False)  # the source's: small files are read in this order


# The note of a stage that found DIR/<name> complete from this source (stage.already_staged).
ALREADY_STAGED = "already staged"


@record
class Summary:
    path: Path
    files: int = 0
    bytes: int = 0
    skipped: int = 0
    seconds: float = 0.0
    verified: bool = False
    notes: list[str] = field(default_factory=list)

    def described(self) -> str:
        """What this stage did, in a person's words: what was copied, how large and how fast, or why
        nothing was ("already staged", "nothing to copy"), never "0 files, 0.0 MB copied"."""
        others = [note for note in self.notes if note != ALREADY_STAGED]
        if len(others) < len(self.notes):
            done = f"{ALREADY_STAGED} from this source as it is now: nothing copied"
        elif self.files:
            done = f"{counted(self.files, 'file')} ({human_size(self.bytes)}) copied in {self.seconds:.1f}s"
            done += f", {human_size(self.bytes / self.seconds)}/s" if self.bytes and self.seconds > 0 else ""
        else:
            done = "nothing left to copy" if self.skipped else "nothing to copy: the source holds no file"
        if self.skipped:
            done += f"; {counted(self.skipped, 'file')} already there from the interrupted stage it resumed"
        return done + ("; verified" if self.verified else "") + (f" ({'; '.join(others)})" if others else "")


class Halted(Exception):
    """The stage was told to stop (Ctrl-C, SIGTERM): a copy thread leaves at its next read."""


class Throttle:
    """--bwlimit: at most `mb_per_s` MB/s read by this process, over every copy thread together, so a
    stage leaves the shared storage room for the rest of the cluster. A thread that read ahead of
    the rate sleeps until the rate catches up; a rate of 0 (or None) never sleeps.

    Every read of a copy passes here, so this is also where the copy threads stop: after `halt()`,
    a sleeping thread wakes and each raises Halted at its next read. Without that, an interrupt
    waited for every running batch (up to BATCH_BYTES each, at the --bwlimit rate: minutes, past
    Slurm's KillWait, so the job's stage was killed without a word)."""

    def __init__(
        self,
        mb_per_s: float | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.rate = (mb_per_s or 0) * 1e6
        self._halted = threading.Event()
        self.clock, self.sleep = clock, sleep or self._sleep_unless_halted
        self._lock = threading.Lock()
        self._free_at = 0.0

    def halt(self) -> None:
        self._halted.set()

    def _sleep_unless_halted(self, seconds: float) -> None:
        if self._halted.wait(seconds):
            raise Halted

    @property
    def chunk(self) -> int:
        """The most bytes one read should ask for: a tenth of a second's worth when limited."""
        return max(1 << 20, int(self.rate / 10)) if self.rate else 64 << 20

    def __call__(self, nbytes: int) -> None:
        if self._halted.is_set():
            raise Halted
        if not self.rate or nbytes <= 0:
            return
        with self._lock:
            now = self.clock()
            self._free_at = max(self._free_at, now) + nbytes / self.rate
            wait = self._free_at - now
        if wait > 0:
            self.sleep(wait)


UNLIMITED = Throttle(None)


def staged_name(src: Path) -> str:
    name = src.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def is_archive(src: Path) -> bool:
    return src.is_file() and src.name.endswith(ARCHIVE_SUFFIXES)
