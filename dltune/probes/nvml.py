"""GPU state through NVML. The only module that imports pynvml (from nvidia-ml-py).

No library or no driver -> ``available=False`` with the reason; a NotSupported field -> None; a lost
GPU -> an entry with its error while the others still report; nvmlShutdown always runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

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
