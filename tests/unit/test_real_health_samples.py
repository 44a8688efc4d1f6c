"""The host health checks peers have (memory errors, NVMe health, GPU memory ECC, the GPUDirect path,
the GPU-NIC topology, the PCIe path) on outputs real machines produced, published by others
(tests/fixtures/real/<kind>/, each with its source and the words that justify its verdict).

Where the sample is a listing of files (sysfs as `grep . /sys/...` prints it), the test lays those
files out under a fixture root and runs the real probe on it; where it is a tool's own report
(edac-util, nvme-cli, smartctl), the test reads the figures the node's files or the tool would give.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from dltune.checks.fabric import hca_pcie, judge_gpu_topology, memlock, nearest_nics, pcie_acs
from dltune.checks.gpu import ecc
from dltune.checks.storage import judge_nvme
from dltune.checks.system import memory_errors
from dltune.model import Result, Status
from dltune.probes.fabric import acs_control, parse_memlock
from dltune.probes.hostfs import HostFS
from dltune.probes.memory_errors import read_memory_errors
from dltune.probes.nvme import parse_smart_log
from dltune.snapshot import Fabric, Gpu, NvmlState, PciDevice, Snapshot
from tests.real_corpus import Sample, samples

# Published with a quoting prefix (mail "> ", a code comment "// ") or an indent: stripped per line.
_QUOTING = re.compile(r"^(?:>\s?|//\s?|\s)+")


def _unquoted(body: str) -> list[str]:
    return [_QUOTING.sub("", line).rstrip() for line in body.splitlines()]


def _non_pass(results: list[Result]) -> dict[str | None, str]:
    return {r.subject: r.status.value for r in results if r.status.value != "pass"}


def _said(results: list[Result]) -> list[tuple[str | None, str, str]]:
    return [(r.subject, r.status.value, r.summary) for r in results]


def _expected(expect: str) -> dict[str | None, str]:
    """ "pass" (nothing but passes), or "warn mc0; fail mc3" (subject -> status)."""
    if expect == "pass":
        return {}
    return {part.split(" ", 1)[1]: part.split(" ", 1)[0] for part in expect.split("; ")}


# ------------------------------------------------------------------------------------- memory errors

_SYSFS_LINE = re.compile(r"^(?P<path>/sys/devices/system/edac/mc/\S+?):(?P<value>.*)$")
_EDAC_UTIL = re.compile(r"^(?P<mc>mc[0-9]+): .*?(?P<n>[0-9]+) (?P<kind>Corrected|Uncorrected) Errors")
_EDAC_REPORT = re.compile(r"^(?P<mc>mc[0-9]+):\S*:(?P<kind>CE|UE):(?P<n>[0-9]+)$")


def edac_tree(lines: list[str], root: Path) -> bool:
    """The sample's EDAC figures as sysfs files under root: the listing as it is (`grep . path`, or
    path and value on alternate lines), or edac-util's per-controller sums as mcN's own counters.
    False when the sample is no EDAC listing (a kernel log)."""
    files: dict[str, str] = {}
    for index, line in enumerate(lines):
        match = _SYSFS_LINE.match(line)
        if match:
            files[match["path"]] = match["value"]
        elif line.startswith("/sys/devices/system/edac/mc/") and index + 1 < len(lines):
            files[line] = lines[index + 1]
    sums: dict[str, dict[str, int]] = defaultdict(lambda: {"ce_count": 0, "ue_count": 0})
    for line in lines:
        match = _EDAC_UTIL.match(line) or _EDAC_REPORT.match(line)
        if match:
            name = "ce_count" if match["kind"] in ("Corrected", "CE") else "ue_count"
            sums[match["mc"]][name] += int(match["n"])
    for mc, counts in sums.items():
        for name, value in counts.items():
            files[f"/sys/devices/system/edac/mc/{mc}/{name}"] = str(value)
    for path, value in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(value + "\n")
    return bool(files)


@pytest.mark.parametrize("sample", samples("edac"), ids=str)
def test_host_memory_errors(sample: Sample, tmp_path: Path) -> None:
    """system.memory_errors: uncorrected errors on a controller fail, corrected ones warn, all-zero
    counters pass; a machine check no EDAC line attributes is judged as controller "unknown"."""
    lines = _unquoted(sample.body)
    listing = edac_tree(lines, tmp_path)
    found = read_memory_errors(HostFS(tmp_path), None if listing else "\n".join(lines))
    results = memory_errors(Snapshot(root=str(tmp_path), memory_errors=found))
    assert _non_pass(results) == _expected(sample.expect), _said(results)


# --------------------------------------------------------------------------------------- NVMe health


@pytest.mark.parametrize("sample", samples("nvme_smart"), ids=str)
def test_nvme_health_logs(sample: Sample) -> None:
    """storage.nvme_health's judgement of the SMART / Health log as nvme-cli and smartctl printed it
    (JSON of either tool and version, or their text): "fail <field>" names the field that fails."""
    figures = parse_smart_log(
        "\n".join(_unquoted(sample.body)) if not sample.body.lstrip().startswith("{") else sample.body
    )
    assert figures, "nothing read from the sample"
    status, reasons, _critical = judge_nvme(figures)
    if sample.expect == "pass":
        assert (status, reasons) == (Status.PASS, []), figures
        return
    verdict, field = sample.expect.split(" ", 2)[:2]
    assert status.value == verdict and any(reason.startswith(field) for reason in reasons), (figures, reasons)


# ------------------------------------------------------------------------------------ GPU memory ECC


def _smi_sections(body: str, lone_bus: str) -> list[tuple[str, dict[tuple[str, ...], str]]]:
    """`nvidia-smi -q` text as (bus id, {header path: value}) per GPU: each line's key under the
    headers its indentation nests it in. An excerpt of one GPU without its "GPU <bus id>" line is that
    GPU (``lone_bus``, the bus id the sample names)."""
    gpus: list[tuple[str, dict[tuple[str, ...], str]]] = []
    stack: list[tuple[int, str]] = []
    for raw in body.splitlines():
        line = raw.rstrip()
        match = re.match(r"^GPU ([0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\.[0-7]$", line.strip())
        if match and len(line) - len(line.lstrip()) == 0:
            gpus.append((match[1][4:].lower(), {}))
            stack = []
            continue
        if not line.strip():
            continue
        if not gpus:
            gpus.append((lone_bus, {}))
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(name for _, name in stack), key.strip())
        if sep and value.strip():
            gpus[-1][1][path] = value.strip()
        else:
            stack.append((indent, key.strip()))
    return gpus


def _figure(fields: dict[tuple[str, ...], str], *path: str) -> int | None:
    """The number at the first field whose header path ends with ``path`` (N/A: None)."""
    for key, value in fields.items():
        if key[-len(path) :] == path:
            number = value.split(" ")[0]
            return int(number) if number.isdigit() else None
    return None


def _flag(fields: dict[tuple[str, ...], str], *path: str) -> bool | None:
    for key, value in fields.items():
        if key[-len(path) :] == path and value in ("Yes", "No"):
            return value == "Yes"
    return None


def _volatile(fields: dict[tuple[str, ...], str], kind: str) -> int | None:
    """Volatile corrected/uncorrected device memory errors: DRAM and SRAM (Ampere and later), or the
    Single/Double Bit totals of older GPUs."""
    words = ("Correctable",) if kind == "corrected" else ("Uncorrectable",)
    found = [
        int(value)
        for key, value in fields.items()
        if len(key) >= 2
        and key[-2] == "Volatile"
        and value.isdigit()
        and any(key[-1].startswith(f"{memory} {word}") for memory in ("DRAM", "SRAM") for word in words)
    ]
    legacy = _figure(fields, "Volatile", "Single Bit" if kind == "corrected" else "Double Bit", "Total")
    return sum(found) if found else legacy


def gpus_of_sample(sample: Sample) -> dict[str, Gpu]:
    """What NVML would answer for each GPU the sample shows (by bus id, or uuid for the CSV)."""
    lines = sample.body.strip().splitlines()
    if lines[0].startswith("gpu_uuid,"):
        found = {}
        for index, line in enumerate(lines[1:]):
            uuid, corrected, uncorrected, pending, failure = (
                c.strip() for c in line.split("#")[0].split(",")
            )
            found[uuid[:12]] = Gpu(
                index=index,
                remapped_rows_corrected=int(corrected),
                remapped_rows_uncorrected=int(uncorrected),
                remapped_rows_pending=pending == "Yes",
                remapped_rows_failure=failure == "Yes",
            )
        return found
    found = {}
    for index, (bus, fields) in enumerate(_smi_sections(sample.body, sample.expect.split(" ")[0])):
        histogram = {
            name.lower(): _figure(fields, "Bank Remap Availability Histogram", name)
            for name in ("Max", "High", "Partial", "Low", "None")
        }
        found[bus] = Gpu(
            index=index,
            ecc_corrected_volatile=_volatile(fields, "corrected"),
            ecc_uncorrected_volatile=_volatile(fields, "uncorrected"),
            remapped_rows_corrected=_figure(fields, "Remapped Rows", "Correctable Error"),
            remapped_rows_uncorrected=_figure(fields, "Remapped Rows", "Uncorrectable Error"),
            remapped_rows_pending=_flag(fields, "Remapped Rows", "Pending"),
            remapped_rows_failure=_flag(fields, "Remapped Rows", "Remapping Failure Occurred"),
            remap_histogram=None if histogram["max"] is None else {k: v or 0 for k, v in histogram.items()},
            retired_pages_sbe=_figure(fields, "Retired Pages", "Single Bit ECC"),
            retired_pages_dbe=_figure(fields, "Retired Pages", "Double Bit ECC"),
        )
    return found


@pytest.mark.parametrize("sample", samples("gpu_ecc"), ids=str)
def test_gpu_memory_errors(sample: Sample) -> None:
    """gpu.ecc on the memory error state `nvidia-smi -q` printed (NVML's own figures): failed remaps
    and uncorrected errors fail, pending remaps, remapped rows and retired pages warn (still usable),
    all-zero passes. No previous audit: the correctable count alone is no finding."""
    gpus = gpus_of_sample(sample)
    snap = Snapshot(root="/", nvml=NvmlState(True, gpus=tuple(gpus.values())))
    by_index = {str(r.subject): r for r in ecc(snap)}
    verdicts = {key: by_index[str(gpu.index)].status.value for key, gpu in gpus.items()}
    expected = {part.split(" ")[0]: part.split(" ")[1] for part in sample.expect.split("; ")}
    assert verdicts == expected, {k: by_index[str(g.index)].summary for k, g in gpus.items()}


# ------------------------------------------------------------------------------ GPUDirect RDMA path

GPUDIRECT = {"health": {"gpudirect_rdma": True}}
ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
_BRIDGE = re.compile(r"^(?P<bdf>(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) ")
_ACS_AT = re.compile(r"Capabilities: \[(?P<offset>[0-9a-f]+) v[0-9]\] Access Control Services")


def config_space(acs_offset: int, control: int) -> bytes:
    """A bridge's 4 KiB config space as root reads it: an extended capability (AER, 0x0001) at 0x100
    chaining to ACS (0x000D) where lspci showed it, with its control register set as lspci decoded."""
    config = bytearray(4096)
    config[0x100:0x104] = (0x0001 | (1 << 16) | (acs_offset << 20)).to_bytes(4, "little")
    config[acs_offset : acs_offset + 4] = (0x000D | (1 << 16)).to_bytes(4, "little")
    config[acs_offset + 6 : acs_offset + 8] = control.to_bytes(2, "little")
    return bytes(config)


def acs_of_sample(body: str) -> dict[str, int | None]:
    """Each bridge's ACS Control register as the kernel's config space holds it (through acs_control,
    the probe's own reader), from the ACSCtl flags lspci printed."""
    found: dict[str, int | None] = {}
    bridge, offset = None, 0x100
    for line in (_QUOTING.sub("", raw) for raw in body.splitlines()):
        match = _BRIDGE.match(line)
        if match:
            bridge = match["bdf"]
        at = _ACS_AT.search(line)
        if at:
            offset = int(at["offset"], 16)
        if line.startswith("ACSCtl:") and bridge:
            control = sum(1 << i for i, flag in enumerate(ACS_FLAGS) if f"{flag}+" in line)
            found[bridge] = acs_control(config_space(offset, control))
    return found


@pytest.mark.parametrize("sample", samples("pcie_acs"), ids=str)
def test_acs_redirection_on_the_gpudirect_path(sample: Sample) -> None:
    """fabric.pcie_acs on the ACS Control registers lspci decoded from real bridges: ReqRedir+,
    CmpltRedir+ (or EgressCtrl+) fail naming each bridge, all flags off passes (SrcValid alone is no
    redirection: NCCL's own heuristic is looser)."""
    acs = acs_of_sample(sample.body)
    assert acs, "no ACSCtl line read"
    result = pcie_acs(Snapshot(root="/", fabric=Fabric(acs=acs), expected=GPUDIRECT))
    status, _, named = sample.expect.partition(" ")
    assert result.status.value == status, result.summary
    for bridge in re.findall(r"(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", named):
        assert bridge in result.summary, result.summary


_ULIMIT = re.compile(r"max locked memory\s+\(kbytes, -l\)\s+(?P<value>\S+)")


@pytest.mark.parametrize("sample", samples("memlock"), ids=str)
def test_locked_memory_limits(sample: Sample) -> None:
    """fabric.memlock: unlimited passes, any limit fails saying it as a person reads it, "64 KiB",
    "8 MiB" (/proc/<pid>/limits is in bytes, the probe's own parser; `ulimit -a` in KiB)."""
    body = "\n".join(_unquoted(sample.body))
    limit = parse_memlock(body)
    if limit is None:
        match = _ULIMIT.search(body)
        assert match, "no locked-memory line"
        limit = -1 if match["value"] == "unlimited" else int(match["value"]) * 1024
    result = memlock(
        Snapshot(root="/", fabric=Fabric(memlock_bytes=limit, memlock_source="slurmd"), expected=GPUDIRECT)
    )
    if sample.expect == "pass":
        assert result.status is Status.PASS, result.summary
    else:
        assert result.status is Status.FAIL and sample.expect.removeprefix("fail ") in result.summary, (
            result.summary
        )


def topo_matrix(body: str) -> dict[str, tuple[str, dict[str, str]]]:
    """`nvidia-smi topo -m`: each GPU's NUMA affinity ("?" without that column) and its level to each
    NIC, NICs by their RDMA names (the NIC legend's, or the mlx5_N headers of older drivers)."""
    lines = [line.rstrip() for line in body.splitlines() if line.strip()]
    header = next(line for line in lines if re.match(r"^\s*GPU0\b", line))
    columns = re.findall(r"\b(?:GPU[0-9]+|NIC[0-9]+|mlx5_[0-9]+)\b", header.split("CPU")[0])
    legend = dict(re.findall(r"^\s*(NIC[0-9]+): (\S+)$", body, re.MULTILINE))
    has_numa = "NUMA Affinity" in header
    found = {}
    for line in lines:
        words = line.split()
        if not words or not re.fullmatch(r"GPU[0-9]+", words[0]) or line is header:
            continue
        values, rest = words[1 : 1 + len(columns)], words[1 + len(columns) :]
        levels = {
            legend.get(c, c): v for c, v in zip(columns, values, strict=True) if not c.startswith("GPU")
        }
        # Trailing columns: CPU Affinity, NUMA Affinity[, GPU NUMA ID]; a blank CPU Affinity is one fewer.
        trailing = 2 + ("GPU NUMA ID" in header)
        numa = "?" if not has_numa or not rest else rest[1] if len(rest) >= trailing else rest[0]
        found[words[0]] = (numa, levels)
    return found


@pytest.mark.parametrize("sample", samples("topo"), ids=str)
def test_gpu_nic_topology(sample: Sample) -> None:
    """Each GPU's nearest NICs as fabric.topology picks them (ties all named), from the levels NVIDIA's
    own tool printed; judged against those as the site's expectations the node passes, with two GPUs'
    NICs swapped it fails, and without expectations a GPU reaching NICs only across SYS warns."""
    matrix = topo_matrix(sample.body)
    expected = {part.split(" ")[0]: part.split(" ")[1:] for part in sample.expect.split("; ")}
    picked = {}
    for gpu, (numa, levels) in matrix.items():
        level, nearest = nearest_nics(levels)
        picked[gpu] = [f"numa{numa}", "+".join(nearest)]
        facts = {"numa_node": numa, "nearest_nics": nearest, "level": level}
        assert judge_gpu_topology(facts, numa, nearest)[0] is Status.PASS
        assert judge_gpu_topology(facts, None, None)[0] is (Status.WARN if level == "SYS" else Status.PASS)
        assert judge_gpu_topology(facts, None, ["mlx5_99"])[0] is Status.FAIL
    assert picked == expected


# --------------------------------------------------------------------------- the PCIe link and its slot

_LIMITED = re.compile(
    r"(?P<bdf>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]):\s+[0-9.]+\s+Gb/s\s+available\s+PCIe\s+bandwidth,\s+"
    r"limited\s+by\s+(?P<speed>[0-9.]+)\s+GT/s\s+PCIe\s+x(?P<width>[0-9]+)\s+link\s+at\s+\S+\s+\(capable\s+of\s+"
    r"[0-9.]+\s+Gb/s\s+with\s+(?P<max_speed>[0-9.]+)\s+GT/s\s+PCIe\s+x(?P<max_width>[0-9]+)\s+link\)"
)
_LNK = re.compile(r"Lnk(?P<which>Cap|Sta):.*?Speed (?P<speed>[0-9.]+)GT/s[^,]*, Width x(?P<width>[0-9]+)")
_SLOT = re.compile(r"^(?P<speed>[0-9.]+) GT/s x(?P<width>[0-9]+)")


def linked_device(sample: Sample, address: str) -> PciDevice:
    """The device's link as the sample shows it (the kernel's "limited by" message: its link and what
    it is capable of; or lspci's LnkSta and LnkCap), below the slot the source names (header SLOT)."""
    body = " ".join(sample.body.split())
    found = {m["bdf"]: m for m in _LIMITED.finditer(body)}
    short = address.removeprefix("0000:")
    message = found.get(address) or found.get(f"0000:{short}")
    if message:
        now, most = (message["speed"], message["width"]), (message["max_speed"], message["max_width"])
    else:
        links = {m["which"]: (m["speed"], m["width"]) for m in _LNK.finditer(sample.body)}
        now, most = links["Sta"], links["Cap"]
    slot = _SLOT.match(sample.header["SLOT"])
    assert slot, sample.header["SLOT"]
    return PciDevice(
        address,
        "hca",
        "0x15b3",
        "0x020700",
        link_width=int(now[1]),
        link_width_max=int(most[1]),
        link_speed=f"{float(now[0]):.1f} GT/s PCIe",
        link_speed_max=f"{float(most[0]):.1f} GT/s PCIe",
        bridges=("slot",),
        upstream_width_max=int(slot["width"]),
        upstream_speed_max=f"{float(slot['speed']):.1f} GT/s PCIe",
    )


@pytest.mark.parametrize("sample", samples("pcie_path"), ids=str)
def test_pcie_links_against_their_slot(sample: Sample) -> None:
    """fabric.hca_pcie's judgement of a link against the lesser of what the device and its slot
    support: a Gen5 device in a Gen4 slot, an x16 card in an x8 or x1 slot pass (as designed); a link
    that trained below a slot that supports more warns or fails."""
    for part in sample.expect.split("; "):
        status, address = part.split(" ")
        device = linked_device(sample, address)
        (result,) = hca_pcie(Snapshot(root="/", fabric=Fabric(pci=(device,))))
        assert result.status.value == status, (result.summary, device)
        # The device end alone would have judged every one of these below its own maximum.
        assert (device.link_speed, device.link_width) != (device.link_speed_max, device.link_width_max)
