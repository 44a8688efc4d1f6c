"""The contracts every area shares: Status, Result, the areas, the exit codes, and the errors the CLI
reports in one line."""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from dltune.records import field, record
from dltune.text import visible, visible_data

AREAS: tuple[str, ...] = (
    "system",
    "storage",
    "driver",
    "gpu",
    "fabric",
    "nfs",
    "network",
    "env",
    "staging",
    "bench",
)


class Status(str, enum.Enum):
    PASS = "pass"  # noqa: S105 - a check status, not a password
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


# Exit codes of every dltune command that judges (README, `dltune audit`; ARCHITECTURE.md).
EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE_OR_ERROR = 2
# `dltune check` alone: no fail and no error, but the bench that should prove the node could not run
# (no PyTorch; a PyTorch that sees none of the GPUs NVML reports): never a silent pass
# (dltune.bench.judge.check_exit_code).
EXIT_NOT_PROVED = 3


class DltuneError(Exception):
    """An error whose message says all a user needs (what, where, why): the CLI prints it as one line
    with the command's exit code, never as a traceback (dltune.cli.main)."""


class InputError(DltuneError, ValueError):
    """A file or text dltune was given that it cannot use; the message names it and says why."""


@functools.lru_cache(maxsize=256)
def _area(check_id: str) -> str:
    return check_id.partition(".")[0]


class FailureClass(enum.Enum):
    """How the Slurm health check treats a check's critical fail (the check declares it)."""

    HARD = "hard"  # the node is broken now (a lost GPU, uncorrected ECC, a reset Xid): drain at once
    TRANSIENT = "transient"  # often clears by itself (heat, clocks, NFS latency, a flapping link):
    # drain only after several consecutive failing runs, resume only after a stable passing window


@record(frozen=True)
class Result:
    """One judgement of one check on one subject (a mount path, a GPU, a VIP... or None)."""

    id: str
    status: Status
    summary: str
    subject: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    remedy: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    critical: bool = False
    # What many nodes share and whose failure this finding typically is (an NFS server, the subnet
    # manager, the time source), named so: the same finding on many nodes is one cause, not N nodes.
    shared_dependency: str | None = None
    # An operator's acknowledgement of this finding (dltune.fleet.acks): {"by", "why", "since", "until",
    # "was": the status it had}. An acknowledged fail is shown as warn, not critical: known, accepted,
    # no drain and no alert until the acknowledgement ends.
    acknowledged: Mapping[str, Any] | None = None
    # What the finding costs in training time (dltune.costs.impact): {"basis": "measured" | "estimated",
    # "fraction", "of", "scope", "gpus", "use", "gpu_hours_per_day", "method", "source"?}, or
    # {"basis": "unpriced", "why"}; None on a result that is no finding (or a command that prices none).
    impact: Mapping[str, Any] | None = None

    @property
    def area(self) -> str:
        return _area(self.id)

    def to_dict(self) -> dict[str, Any]:
        """The result as every renderer shows it: host text through dltune.text's escaping policy."""
        return {
            "id": self.id,
            "area": self.area,
            "subject": None if self.subject is None else visible(self.subject),
            "status": self.status.value,
            "summary": visible(self.summary),
            "evidence": visible_data(self.evidence),
            "remedy": None if self.remedy is None else visible(self.remedy),
            "metrics": {visible(k): v for k, v in self.metrics.items()},
            "critical": self.critical,
            "shared_dependency": None if self.shared_dependency is None else visible(self.shared_dependency),
            "acknowledged": None if self.acknowledged is None else visible_data(self.acknowledged),
            "impact": None if self.impact is None else visible_data(self.impact),
        }


def exit_code(results: Iterable[Result]) -> int:
    """0: no fail and no error; 1: at least one fail; 2: no fail but at least one error."""
    statuses = {r.status for r in results}
    if Status.FAIL in statuses:
        return EXIT_FAIL
    if Status.ERROR in statuses:
        return EXIT_USAGE_OR_ERROR
    return EXIT_OK


# --- What a person reads of a quantity (summaries, findings, staging's lines; machine outputs keep
# bytes and counts) ------------------------------------------------------------------------------------

_DECIMAL_UNITS = ("B", "kB", "MB", "GB", "TB", "PB", "EB")
_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_size(n_bytes: float, binary: bool = False) -> str:
    """A size as a person reads it: at most three significant digits in the largest unit that keeps
    the figure under 1000. Decimal (disks, datasets, rates: "512 B", "4.1 kB", "12.3 MB", "1.23 GB"),
    or with ``binary`` what the kernel sizes memory in (tmpfs, locked memory: "64 KiB", "8 MiB",
    "205 GiB")."""
    units, base = (_BINARY_UNITS, 1024) if binary else (_DECIMAL_UNITS, 1000)
    value, sign = abs(float(n_bytes)), "-" if n_bytes < 0 else ""
    unit = units[0]
    for unit in units:
        # 999.7 would read "1e+03" at three digits: it is the next unit's 1.
        if float(f"{value:.3g}") < 1000 or unit == units[-1]:
            break
        value /= base
    return f"{sign}{round(value)} B" if unit == "B" else f"{sign}{value:.3g} {unit}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """ "1 file", "3 files", "0 files": a count with its noun in the number it takes."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
