"""The probes' children that mostly wait (dmesg; systemd-detect-virt and timedatectl) run beside each
other and the file reads, not one after the other (a start-up cost of every audit, measured in
benchmarks/audit_speed.py). Shown without a clock: each stand-in command waits for the other to have
started, which only happens when both are in flight at once."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from dltune.probes import collect_snapshot
from dltune.probes.runner import CommandResult
from tests.conftest import FIXTURES

DMESG_LINE = "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15"


class MeetingRunner:
    """dmesg and systemd-detect-virt each wait (up to 10 s) until the other has been called."""

    def __init__(self) -> None:
        self.started = {"dmesg": threading.Event(), "systemd-detect-virt": threading.Event()}
        self.met: dict[str, bool] = {}

    def run(self, argv: Sequence[str], timeout: float = 5.0) -> CommandResult:
        name = argv[0]
        if name in self.started:
            self.started[name].set()
            other = next(n for n in self.started if n != name)
            self.met[name] = self.started[other].wait(10)
            out = DMESG_LINE if name == "dmesg" else "docker"
            return CommandResult(tuple(argv), 0, out + "\n", "")
        return CommandResult(tuple(argv), 127, "", f"{name}: not here")


def test_the_kernel_log_and_the_clock_are_read_at_the_same_time(tmp_path: Path) -> None:
    runner = MeetingRunner()
    snapshot = collect_snapshot(FIXTURES / "tmp_tmpfs_ok", runner=runner, areas=["system", "gpu"], euid=0)
    assert runner.met == {"dmesg": True, "systemd-detect-virt": True}
    # What each child said still reaches the snapshot where it did.
    assert snapshot.kernel_log.text is not None and DMESG_LINE in snapshot.kernel_log.text
    assert snapshot.time_sync.container == "docker"
