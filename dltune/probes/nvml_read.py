"""The NVML child: what `dltune.probes.nvml` runs in a process of its own (a wedged driver can hang
any NVML call). It imports nothing of dltune's and answers plain JSON, so that the child starts fast:
its half-second clock window runs while the audit's other probes read. Keys are those of
`dltune.snapshot.Gpu`, `NvLink` and `NvmlState`; the parent builds them (`nvml._from_json`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Clock event reasons (nvml.h nvmlClocksEventReason*, as dltune.snapshot names them) and NVML's
# clock-event counters (nvmlDeviceGetFieldValues, r535 and later): nanoseconds each reason has held
# the clocks down since the driver loaded. Two reads CLOCK_WINDOW_S apart give the share of that
# window, so a reason seen in one instantaneous mask is told apart from one that persists.
CLOCK_EVENT_FIELDS = {
    0x4: 74,  # SW_POWER_CAP: NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP
    0x10: 76,  # SYNC_BOOST: NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST
    0x20: 269,  # SW_THERMAL: NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN
    0x40: 270,  # HW_THERMAL: NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN
    0x80: 271,  # HW_POWER_BRAKE: NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN
}
CLOCK_WINDOW_S = 0.5
# The parent's marker on every probe child's argv (dltune.probes.watchdog.CHILD_MARKER).
CHILD_MARKER = "--dltune-probe-child"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def read_nvml() -> dict[str, Any]:
    try:
        import pynvml
    except ImportError:
        return {"available": False, "error": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"available": False, "error": str(exc), "error_code": exc.value}
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        count = pynvml.nvmlDeviceGetCount()
        start = time.monotonic()
        first = [_gpu(pynvml, i) for i in range(count)]
        readable = [(gpu, handle, counters) for gpu, handle, counters in first if handle is not None]
        if readable:
            time.sleep(max(0.0, CLOCK_WINDOW_S - (time.monotonic() - start)))
        window = time.monotonic() - start
        later = {
            gpu["index"]: _clock_window(pynvml, gpu, handle, counters, window)
            for gpu, handle, counters in readable
        }
        return {
            "available": True,
            "driver_version": driver,
            "gpus": [later.get(g["index"], g) for g, _h, _c in first],
        }
    except pynvml.NVMLError as exc:
        return {"available": False, "error": str(exc), "error_code": exc.value}
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _clock_counters(pynvml: Any, handle: Any) -> dict[int, int] | None:
    """Each counted reason's nanoseconds since the driver loaded; None without the counters."""
    try:
        values = pynvml.nvmlDeviceGetFieldValues(handle, list(CLOCK_EVENT_FIELDS.values()))
    except (pynvml.NVMLError, AttributeError):
        return None
    found = {
        bit: int(value.value.ullVal)
        for bit, value in zip(CLOCK_EVENT_FIELDS, values, strict=True)
        if value.nvmlReturn == pynvml.NVML_SUCCESS
    }
    return found or None


def _event_reasons(pynvml: Any, handle: Any) -> int | None:
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        getter = getattr(pynvml, name, None)
        if getter is None:
            continue
        try:
            return int(getter(handle))
        except pynvml.NVMLError:
            continue
    return None


def _clock_window(
    pynvml: Any, gpu: dict[str, Any], handle: Any, before: dict[int, int] | None, window: float
) -> dict[str, Any]:
    after = _clock_counters(pynvml, handle) if before else None
    share = (
        {
            bit: min(1.0, max(0.0, (after[bit] - before[bit]) / (window * 1e9)))
            for bit in before
            if bit in after
        }
        if before and after
        else None
    )
    return {
        **gpu,
        "clock_event_reasons_later": _event_reasons(pynvml, handle),
        "clock_event_share": share,
        "clock_window_s": round(window, 3),
    }


# NVML's NVLink error counters (nvmlNvLinkErrorCounter_t), by NvLink field.
NVLINK_COUNTERS = {
    "replay_errors": 0,  # NVML_NVLINK_ERROR_DL_REPLAY
    "recovery_errors": 1,  # NVML_NVLINK_ERROR_DL_RECOVERY
    "crc_flit_errors": 2,  # NVML_NVLINK_ERROR_DL_CRC_FLIT
    "crc_data_errors": 3,  # NVML_NVLINK_ERROR_DL_CRC_DATA
}
MAX_NVLINKS = 36  # NVML_NVLINK_MAX_LINKS (r560)


def _nvlinks(pynvml: Any, field: Callable[..., Any]) -> list[dict[str, Any]]:
    """Each link NVML answers for; a link it does not (beyond the GPU's count, or every link of a
    PCIe card) is left out."""
    links = []
    for link in range(MAX_NVLINKS):
        active = field(pynvml.nvmlDeviceGetNvLinkState, link)
        if active is None:
            continue
        counters = {
            name: field(pynvml.nvmlDeviceGetNvLinkErrorCounter, link, counter)
            for name, counter in NVLINK_COUNTERS.items()
        }
        links.append({"link": link, "active": bool(active), **counters})
    return links


def _fabric_info(pynvml: Any, field: Callable[..., Any]) -> tuple[int | None, int | None]:
    """(state, status) of the GPU's registration with the NVLink fabric, where the driver has it."""
    info_type = getattr(pynvml, "c_nvmlGpuFabricInfo_t", None)
    if info_type is None or not hasattr(pynvml, "nvmlDeviceGetGpuFabricInfo"):
        return None, None
    info = info_type()
    if field(pynvml.nvmlDeviceGetGpuFabricInfo, ctypes.byref(info)) is None:
        return None, None
    return int(info.state), int(info.status)


def _bus_id(info: Any) -> str | None:
    """NVML's "00000000:3B:00.0" as sysfs names the device: "0000:3b:00.0"."""
    if info is None:
        return None
    raw = _text(info.busId).strip().lower()
    domain, _, rest = raw.partition(":")
    return f"{domain[-4:]}:{rest}" if rest else None


# long: one NVML call per Gpu field, in one constructor call
# nvmlPageRetirementCause_t: pages retired for multiple single-bit errors, for a double-bit error.
RETIRED_FOR_SBE, RETIRED_FOR_DBE = 0, 1
HISTOGRAM_BUCKETS = ("max", "high", "partial", "low", "none")


def _histogram(values: Any) -> dict[str, int] | None:
    """nvmlRowRemapperHistogramValues_t: how many banks have all, many, some, few or no spare rows."""
    if values is None:
        return None
    return {name: int(getattr(values, name, 0)) for name in HISTOGRAM_BUCKETS}


def _count(pages: Any) -> int | None:
    return None if pages is None else len(pages)


def _pending(status: Any, pynvml: Any) -> bool | None:
    return None if status is None else status == pynvml.NVML_FEATURE_ENABLED


# long: one NVML read per Gpu field, in one dict the snapshot's dataclass mirrors
def _gpu(pynvml: Any, index: int) -> tuple[dict[str, Any], Any, dict[int, int] | None]:
    """The GPU's fields, its handle (None when it has none), and its clock-event counters now."""
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError_NoPermission as exc:
        return {"index": index, "unreadable": str(exc)}, None, None
    except pynvml.NVMLError as exc:
        return {"index": index, "error": str(exc)}, None, None

    lost: list[str] = []
    # NVML's errors per query (NVML_ERROR_UNKNOWN and the like): data, never silently "no value". A
    # device that answers no query at all is lost, as gpustat counts it.
    failed: dict[str, str] = {}
    answered: list[str] = []

    def field(fn: Callable[..., T], *args: Any) -> T | None:
        name = getattr(fn, "__name__", "query").removeprefix("nvmlDevice")
        try:
            value = fn(handle, *args)
        except pynvml.NVMLError_NotSupported:
            answered.append(name)
            return None
        except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_InvalidArgument):
            # An older driver's library lacks the query; a link index beyond the GPU's count is invalid.
            return None
        except pynvml.NVMLError as exc:
            if isinstance(exc, pynvml.NVMLError_GpuIsLost) and not lost:
                lost.append(str(exc))
            failed.setdefault(name, str(exc))
            return None
        answered.append(name)
        return value

    def event_reasons() -> int | None:
        getter = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        value = field(getter) if getter else None
        return value if value is not None else field(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)

    counters = _clock_counters(pynvml, handle)
    remapped = field(pynvml.nvmlDeviceGetRemappedRows)
    utilization = field(pynvml.nvmlDeviceGetUtilizationRates)
    default_limit = field(pynvml.nvmlDeviceGetPowerManagementDefaultLimit)
    power = field(pynvml.nvmlDeviceGetPowerUsage)
    limit = field(pynvml.nvmlDeviceGetEnforcedPowerLimit)
    persistence = field(pynvml.nvmlDeviceGetPersistenceMode)
    name = field(pynvml.nvmlDeviceGetName)
    uuid = field(pynvml.nvmlDeviceGetUUID)
    processes = field(pynvml.nvmlDeviceGetComputeRunningProcesses)
    vbios = field(pynvml.nvmlDeviceGetVbiosVersion)
    fabric_state, fabric_status = _fabric_info(pynvml, field)
    inforom = field(pynvml.nvmlDeviceGetInforomImageVersion)
    gpu = dict(
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
        ecc_corrected_volatile=field(
            pynvml.nvmlDeviceGetTotalEccErrors,
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        ),
        remapped_rows_pending=None if remapped is None else bool(remapped[2]),
        remapped_rows_failure=None if remapped is None else bool(remapped[3]),
        remapped_rows_corrected=None if remapped is None else int(remapped[0]),
        remapped_rows_uncorrected=None if remapped is None else int(remapped[1]),
        remap_histogram=_histogram(field(pynvml.nvmlDeviceGetRowRemapperHistogram)),
        retired_pages_sbe=_count(field(pynvml.nvmlDeviceGetRetiredPages, RETIRED_FOR_SBE)),
        retired_pages_dbe=_count(field(pynvml.nvmlDeviceGetRetiredPages, RETIRED_FOR_DBE)),
        retired_pages_pending=_pending(field(pynvml.nvmlDeviceGetRetiredPagesPendingStatus), pynvml),
        utilization_percent=None if utilization is None else int(utilization.gpu),
        power_default_limit_w=None if default_limit is None else default_limit / 1000.0,
        compute_pids=None if processes is None else sorted(int(p.pid) for p in processes),
        pci_bus_id=_bus_id(field(pynvml.nvmlDeviceGetPciInfo)),
        app_clock_mhz=field(pynvml.nvmlDeviceGetApplicationsClock, pynvml.NVML_CLOCK_GRAPHICS),
        app_clock_default_mhz=field(pynvml.nvmlDeviceGetDefaultApplicationsClock, pynvml.NVML_CLOCK_GRAPHICS),
        vbios_version=_text(vbios) if vbios is not None else None,
        inforom_image=_text(inforom) if inforom is not None else None,
        nvlinks=_nvlinks(pynvml, field),
        fabric_state=fabric_state,
        fabric_status=fabric_status,
    )
    if lost:
        return {"index": index, "error": lost[0]}, None, None
    if failed and not answered:
        first = next(iter(failed.items()))
        return {"index": index, "error": f"every NVML query failed ({first[0]}: {first[1]})"}, None, None
    gpu["nvml_errors"] = failed or None
    return gpu, handle, counters


if __name__ == "__main__" and CHILD_MARKER in sys.argv:
    json.dump(read_nvml(), sys.stdout)
