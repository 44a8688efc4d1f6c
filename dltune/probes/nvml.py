"""GPU state through NVML, read in a child process (``dltune.probes.nvml_read``, the only module that
imports pynvml, from nvidia-ml-py) under a deadline.

No library or no driver -> ``available=False`` with the reason; a NotSupported field -> None; a lost
GPU -> an entry with its error while the others still report; nvmlShutdown always runs.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from dltune.probes import nvml_read
from dltune.probes.watchdog import CHILD_MARKER, Deadline, run_child, stuck_children

if TYPE_CHECKING:
    from dltune.snapshot import NvmlState

CLOCK_WINDOW_S = nvml_read.CLOCK_WINDOW_S


# A healthy NVML answers in well under a second per GPU; a wedged one never does.
NVML_TIMEOUT_S = 10.0


def nvml_in_background(
    timeout: float = NVML_TIMEOUT_S, deadline: Deadline | None = None
) -> Future[NvmlState]:
    """probe_nvml_in_child, started now in a thread: its child's clock window then runs while the
    caller imports and reads everything else (the audit starts it before its own heavy imports)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvml")
    try:
        return pool.submit(probe_nvml_in_child, timeout, deadline)
    finally:
        pool.shutdown(wait=False)


def probe_nvml_in_child(timeout: float = NVML_TIMEOUT_S, deadline: Deadline | None = None) -> NvmlState:
    """nvml_read.read_nvml in a child process under a deadline: a hung NVML is a finding, never a hung audit.
    While an earlier audit's NVML child is still stuck, no second one is started (it would hang too)."""
    from dltune.snapshot import NvmlState

    absent = _library_absent()
    if absent is not None:
        return absent
    stuck = stuck_children("nvml", older_than=timeout)
    if stuck:
        return NvmlState(
            False,
            f"NVML did not answer: an earlier audit's NVML probe (pid {', '.join(map(str, stuck))}) is "
            "still stuck in the driver",
            hung=True,
        )
    limit = deadline.limit(timeout) if deadline else timeout
    if limit <= 0:
        if deadline:
            deadline.missed["nvml"] = "NVML (driver and gpu areas): the audit's time ran out before it"
        return NvmlState(False, "not probed: the audit's --timeout ran out first", hung=True)
    done = run_child([sys.executable, "-m", "dltune.probes.nvml_read", CHILD_MARKER, "nvml"], limit)
    if done.late:
        if deadline and deadline.expired():
            deadline.missed["nvml"] = f"NVML (driver and gpu areas): no answer within {limit:.0f} s"
        return NvmlState(False, f"NVML did not answer in {limit:.0f} s", hung=True)
    from dltune.files import safeio

    try:
        return _from_json(safeio.loads(done.stdout))
    except (ValueError, TypeError, KeyError) as exc:
        return NvmlState(
            False, f"NVML probe failed (rc={done.returncode}): {done.stderr.strip()[-300:] or exc}"
        )


def _library_absent() -> NvmlState | None:
    """Answer without a child where NVML cannot even load (no GPU driver on this node): dlopen of the
    library pynvml loads runs no driver call, and saves a Python start on every non-GPU node."""
    from dltune.snapshot import NvmlState

    if importlib.util.find_spec("pynvml") is None:
        return NvmlState(available=False, error="nvidia-ml-py is not installed")
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return NvmlState(available=False, error="NVML Shared Library Not Found", error_code=12)
    return None


def _from_json(data: dict[str, Any]) -> NvmlState:
    from dltune.snapshot import Gpu, NvLink, NvmlState

    gpus = []
    for gpu in data.pop("gpus", []):
        share = gpu.get("clock_event_share")
        if share is not None:  # JSON keys are strings
            gpu["clock_event_share"] = {int(bit): value for bit, value in share.items()}
        if gpu.get("compute_pids") is not None:
            gpu["compute_pids"] = tuple(gpu["compute_pids"])
        if gpu.get("nvlinks") is not None:
            gpu["nvlinks"] = tuple(NvLink(**link) for link in gpu["nvlinks"])
        gpus.append(Gpu(**gpu))
    return NvmlState(**data, gpus=tuple(gpus))
