"""GPU state through NVML. The only module that imports pynvml (from nvidia-ml-py).

No library or no driver -> ``available=False`` with the reason; a NotSupported field -> None; a lost
GPU -> an entry with its error while the others still report; nvmlShutdown always runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib.util
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from dltune.probes.watchdog import CHILD_MARKER, Deadline, run_child, stuck_children

T = TypeVar("T")

# Clock event reasons (nvml.h nvmlClocksEventReason*): what holds a GPU's clocks down.
IDLE = 0x1
APPLICATIONS_CLOCKS_SETTING = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
DISPLAY_CLOCK = 0x100
REASON_NAMES = {
    IDLE: "idle",
    APPLICATIONS_CLOCKS_SETTING: "applications clocks setting",
    SW_POWER_CAP: "sw power cap",
    HW_SLOWDOWN: "hw slowdown",
    SYNC_BOOST: "sync boost",
    SW_THERMAL: "sw thermal slowdown",
    HW_THERMAL: "hw thermal slowdown",
    HW_POWER_BRAKE: "hw power brake",
    DISPLAY_CLOCK: "display clock",
}


@dataclass(frozen=True)
class Gpu:
    index: int
    error: str | None = None  # a GPU that fell off the bus ("GPU is lost") keeps its slot
    name: str | None = None
    uuid: str | None = None
    persistence: bool | None = None
    temperature_c: int | None = None
    slowdown_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    clock_event_reasons: int | None = None
    ecc_uncorrected_volatile: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None


@dataclass(frozen=True)
class NvmlState:
    available: bool
    error: str | None = None
    error_code: int | None = None
    driver_version: str | None = None
    gpus: tuple[Gpu, ...] = ()
    hung: bool = False  # NVML did not answer in time (a wedged GPU or driver)


# A healthy NVML answers in well under a second per GPU; a wedged one never does.
NVML_TIMEOUT_S = 10.0


def probe_nvml_in_child(timeout: float = NVML_TIMEOUT_S, deadline: Deadline | None = None) -> NvmlState:
    """probe_nvml in a child process under a deadline: a hung NVML is a finding, never a hung audit.
    While an earlier audit's NVML child is still stuck, no second one is started (it would hang too)."""
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
    done = run_child([sys.executable, "-m", "dltune.probes.nvml", CHILD_MARKER, "nvml"], limit)
    if done.late:
        if deadline and deadline.expired():
            deadline.missed["nvml"] = f"NVML (driver and gpu areas): no answer within {limit:.0f} s"
        return NvmlState(False, f"NVML did not answer in {limit:.0f} s", hung=True)
    try:
        return _from_json(json.loads(done.stdout))
    except (ValueError, TypeError, KeyError) as exc:
        return NvmlState(
            False, f"NVML probe failed (rc={done.returncode}): {done.stderr.strip()[-300:] or exc}"
        )


def _library_absent() -> NvmlState | None:
    """Answer without a child where NVML cannot even load (no GPU driver on this node): dlopen of the
    library pynvml loads runs no driver call, and saves a Python start on every non-GPU node."""
    if importlib.util.find_spec("pynvml") is None:
        return NvmlState(available=False, error="nvidia-ml-py is not installed")
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return NvmlState(available=False, error="NVML Shared Library Not Found", error_code=12)
    return None


def _from_json(data: dict[str, Any]) -> NvmlState:
    gpus = tuple(Gpu(**gpu) for gpu in data.pop("gpus"))
    return NvmlState(**data, gpus=gpus)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def probe_nvml() -> NvmlState:
    try:
        import pynvml
    except ImportError:
        return NvmlState(available=False, error="nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return NvmlState(available=False, error=str(exc), error_code=exc.value)
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        count = pynvml.nvmlDeviceGetCount()
        return NvmlState(
            available=True, driver_version=driver, gpus=tuple(_gpu(pynvml, i) for i in range(count))
        )
    except pynvml.NVMLError as exc:
        return NvmlState(available=False, error=str(exc), error_code=exc.value)
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _gpu(pynvml: Any, index: int) -> Gpu:
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError as exc:
        return Gpu(index=index, error=str(exc))

    lost: list[str] = []

    def field(fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(handle, *args)
        except pynvml.NVMLError_NotSupported:
            return None
        except pynvml.NVMLError as exc:
            if isinstance(exc, pynvml.NVMLError_GpuIsLost) and not lost:
                lost.append(str(exc))
            return None

    def event_reasons() -> int | None:
        getter = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        value = field(getter) if getter else None
        return value if value is not None else field(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)

    remapped = field(pynvml.nvmlDeviceGetRemappedRows)
    power = field(pynvml.nvmlDeviceGetPowerUsage)
    limit = field(pynvml.nvmlDeviceGetEnforcedPowerLimit)
    persistence = field(pynvml.nvmlDeviceGetPersistenceMode)
    name = field(pynvml.nvmlDeviceGetName)
    uuid = field(pynvml.nvmlDeviceGetUUID)
    gpu = Gpu(
        index=index,
        name=_text(name) if name is not None else None,
        uuid=_text(uuid) if uuid is not None else None,
        persistence=None if persistence is None else persistence == pynvml.NVML_FEATURE_ENABLED,
        temperature_c=field(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU),
        slowdown_c=field(
            pynvml.nvmlDeviceGetTemperatureThreshold, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        power_w=None if power is None else power / 1000.0,
        power_limit_w=None if limit is None else limit / 1000.0,
        pcie_gen=field(pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
        pcie_gen_max=field(pynvml.nvmlDeviceGetMaxPcieLinkGeneration),
        pcie_width=field(pynvml.nvmlDeviceGetCurrPcieLinkWidth),
        pcie_width_max=field(pynvml.nvmlDeviceGetMaxPcieLinkWidth),
        clock_event_reasons=event_reasons(),
        ecc_uncorrected_volatile=field(
            pynvml.nvmlDeviceGetTotalEccErrors,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        ),
        remapped_rows_pending=None if remapped is None else bool(remapped[2]),
        remapped_rows_failure=None if remapped is None else bool(remapped[3]),
    )
    return Gpu(index=index, error=lost[0]) if lost else gpu


if __name__ == "__main__" and CHILD_MARKER in sys.argv:
    # The child side of probe_nvml_in_child: one NVML read, as JSON on stdout.
    json.dump(dataclasses.asdict(probe_nvml()), sys.stdout)
