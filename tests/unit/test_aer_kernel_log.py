"""PCIe AER from the kernel log, for kernels and containers without sysfs aer_dev_* counters: the
probe (dltune/probes/aer_log.py) on published kernel logs (tests/fixtures/real/aer_kernel_log/) and on
each wording's boundary, and fabric.pcie_aer judging what it counted as it judges sysfs counters, per
function and severity, naming what sits there; sysfs stays the source where the kernel keeps counters."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dltune.checks.fabric import AER_CORRECTABLE_RISE_WARN, AER_CORRECTABLE_WARN, pcie_aer
from dltune.model import Result, Status
from dltune.probes import aer_log, collect_snapshot
from dltune.probes.aer_log import parse_aer_log
from dltune.probes.packages import kernel_log_of
from dltune.snapshot import AerCounts, Fabric, Gpu, KernelLog, NvmlState, PciDevice, Snapshot
from tests.fabric_tree import pci_device, write
from tests.real_corpus import Sample, samples

GPU = "0000:18:00.0"
ROOT_PORT = "0000:00:01.0"
SWITCH_PORT = "0000:17:00.0"
ENABLED = "pcieport 0000:00:01.0: AER: enabled with IRQ 26\n"


def gpu(aer: AerCounts | None = None, address: str = GPU) -> PciDevice:
    return PciDevice(address, "gpu", "0x10de", "0x030200", aer, bridges=(ROOT_PORT, SWITCH_PORT))


def node(log: str | None, *devices: PciDevice, **changes: object) -> Snapshot:
    kernel_log = (
        kernel_log_of(log) if log is not None else KernelLog(None, "needs root (kernel.dmesg_restrict=1)")
    )
    return Snapshot(root="/", kernel_log=kernel_log, fabric=Fabric(pci=devices), **changes)  # type: ignore[arg-type]


def block(
    address: str,
    sev: str = "Correctable",
    driver: str = "nvidia",
    bits: str = "[12] Timeout",
    pci_id: str = "10de:2330",
) -> str:
    """One error as the kernel prints it: the port's message, the function's block, its bits."""
    return (
        f"pcieport {ROOT_PORT}: AER: {sev} error message received from {address}\n"
        f"{driver} {address}: PCIe Bus Error: severity={sev}, type=Data Link Layer, (Transmitter ID)\n"
        f"{driver} {address}:   device [{pci_id}] error status/mask=00001000/00000000\n"
        f"{driver} {address}:    {bits}\n"
    )


def verdicts(results: list[Result]) -> dict[str | None, tuple[str, dict[str, int] | None]]:
    return {r.subject: (r.status.value, r.evidence.get("counters")) for r in results}


# ---------------------------------------------------------------------------------- real samples


def _counts(words: list[str]) -> dict[str, int]:
    return {name: int(value) for name, value in (word.split("=") for word in words)}


def _devices(sample: Sample) -> tuple[PciDevice, ...]:
    """The functions the sample's PCI header states: "<address> <kind> below <bridge>[,<bridge>]"."""
    if sample.header["PCI"].startswith("none"):
        return ()
    found = []
    for part in sample.header["PCI"].split("; "):
        address, kind, _, bridges = part.split(" ")
        vendor = "0x10de" if kind == "gpu" else "0x15b3"
        found.append(PciDevice(address, kind, vendor, "0x030200", None, bridges=tuple(bridges.split(","))))
    return tuple(found)


@pytest.mark.parametrize("sample", samples("aer_kernel_log"), ids=str)
def test_published_kernel_logs(sample: Sample) -> None:
    """Each function's errors by severity as the probe counts them, and fabric.pcie_aer's verdict per
    function (the PCI header: what the source says sits where), with no sysfs counters."""
    log = parse_aer_log(sample.body)
    assert log.unreadable_lines == 0 and log.service and log.boots == 0
    counted = {d.address: d.counts for d in log.devices}
    results = pcie_aer(
        Snapshot(root="/", kernel_log=kernel_log_of(sample.body), fabric=Fabric(pci=_devices(sample)))
    )
    judged: dict[str | None, tuple[str, dict[str, int] | None]] = {}
    for part in sample.expect.split("; "):
        words = part.split(" ")
        if words == ["skip"]:
            assert [r.status for r in results] == [Status.SKIP], results
            continue
        counts = _counts(words[2:])
        logged = counted.get(words[1], AerCounts(0, 0, 0))  # a function without errors: not in the log
        assert (logged.fatal, logged.nonfatal, logged.correctable) == (
            counts["fatal"],
            counts["nonfatal"],
            counts["correctable"],
        ), words
        if words[0] != "parsed":
            judged[words[1]] = (words[0], counts)
    if judged:
        assert verdicts(results) == judged, [(r.subject, r.status.value, r.summary) for r in results]
    for result in results:
        assert result.critical == (
            result.status is Status.FAIL and bool(result.evidence["counters"]["fatal"])
        )
        if result.status is not Status.SKIP:
            assert result.evidence["source"] == "kernel log", result


def test_a_published_log_through_the_probes_of_a_fixture_tree(tmp_path: Path) -> None:
    """The gpu-burn log as dmesg's recorded answer, the K40m below its root port in sysfs without
    aer_dev_* files: the area fabric reads the kernel log, and the root port fails for it."""
    (sample,) = [s for s in samples("aer_kernel_log") if s.name.startswith("gpuburn1")]
    write(tmp_path, "/sys/devices/pci0000:00/0000:00:02.0/vendor", "0x8086\n")
    pci_device(tmp_path, "0000:02:00.0", parent="pci0000:00/0000:00:02.0")
    (tmp_path / "dltune-commands.json").write_text(
        json.dumps({"dmesg --kernel --notime": {"stdout": sample.body}})
    )
    results = pcie_aer(collect_snapshot(tmp_path, areas=["fabric"], euid=0))
    assert verdicts(results) == {
        "0000:02:00.0": ("pass", {"fatal": 0, "nonfatal": 0, "correctable": 0}),
        "0000:00:02.0": ("fail", {"fatal": 1, "nonfatal": 0, "correctable": 1}),
    }
    port = next(r for r in results if r.subject == "0000:00:02.0")
    assert port.summary.startswith(
        "PCIe root port 0000:00:02.0 above GPU 0000:02:00.0: 1 fatal PCIe error(s) in the kernel log"
    )
    assert port.critical and port.evidence["nonzero"] == {
        "correctable:Replay Timer Timeout": 1,
        "fatal:Surprise Down Error": 1,
    }
    assert port.evidence["pci_id"] == "8086:6f04" and port.evidence["driver"] == "pcieport"


# ------------------------------------------------------------------ the judgement, at its limits


@pytest.mark.parametrize(
    ("errors", "status"),
    [(AER_CORRECTABLE_WARN - 1, Status.PASS), (AER_CORRECTABLE_WARN, Status.WARN)],
)
def test_correctable_errors_warn_at_the_level_sysfs_counters_warn(errors: int, status: Status) -> None:
    (result,) = pcie_aer(node(block(GPU) * errors, gpu()))
    assert (result.status, result.evidence["counters"]["correctable"]) == (status, errors)
    assert result.evidence["nonzero"] == {"correctable:Timeout": errors}
    assert result.summary.startswith(f"GPU {GPU}: ")


@pytest.mark.parametrize(
    ("before", "status"),
    [(150 - AER_CORRECTABLE_RISE_WARN + 1, Status.PASS), (150 - AER_CORRECTABLE_RISE_WARN, Status.WARN)],
)
def test_correctable_errors_rising_since_the_previous_audit_warn(before: int, status: Status) -> None:
    previous = {f"fabric.pcie_aer|{GPU}": {"correctable": before}}
    (result,) = pcie_aer(node(block(GPU) * 150, gpu(), previous=previous))
    assert result.status is status


@pytest.mark.parametrize(
    ("severity", "status", "critical", "words"),
    [
        ("Uncorrectable (Fatal)", Status.FAIL, True, "1 fatal PCIe error(s) in the kernel log since boot"),
        ("Uncorrected (Fatal)", Status.FAIL, True, "1 fatal PCIe error(s)"),
        ("Uncorrectable (Non-Fatal)", Status.FAIL, False, "1 uncorrectable (non-fatal) PCIe error(s)"),
        ("Uncorrected (Non-Fatal)", Status.FAIL, False, "1 uncorrectable (non-fatal) PCIe error(s)"),
        ("Corrected", Status.PASS, False, "no uncorrectable PCIe errors, 1 correctable in the kernel log"),
    ],
)
def test_one_error_of_each_severity_in_both_wordings(
    severity: str, status: Status, critical: bool, words: str
) -> None:
    (result,) = pcie_aer(node(block(GPU, severity, bits="[ 5] SDES"), gpu()))
    assert (result.status, result.critical) == (status, critical)
    assert words in result.summary and result.evidence["source"] == "kernel log"


def test_a_gpu_named_by_nvml_is_named_by_its_index() -> None:
    nvml = NvmlState(True, gpus=(Gpu(index=3, pci_bus_id=GPU),))
    (result,) = pcie_aer(node(block(GPU, "Uncorrectable (Fatal)"), gpu(), nvml=nvml))
    assert result.summary.startswith(f"GPU 3 ({GPU}): 1 fatal")


# ---------------------------------------------------------------------- which source decides


def test_sysfs_counters_decide_where_the_kernel_keeps_them() -> None:
    """No double counting: the GPU's own counters stand, its log lines are not added."""
    (result,) = pcie_aer(node(block(GPU, "Uncorrectable (Fatal)"), gpu(AerCounts(0, 0, 2))))
    assert (result.status, result.evidence["source"], result.evidence["counters"]["fatal"]) == (
        Status.PASS,
        "sysfs",
        0,
    )
    assert result.summary.endswith("2 correctable since boot")


def test_the_port_above_is_judged_from_the_log_beside_the_gpus_sysfs_counters() -> None:
    log = block(ROOT_PORT, "Uncorrectable (Fatal)", driver="pcieport", bits="[ 5] SDES")
    results = pcie_aer(node(log, gpu(AerCounts(0, 0, 0))))
    assert [(r.subject, r.status, r.evidence["source"]) for r in results] == [
        (GPU, Status.PASS, "sysfs"),
        (ROOT_PORT, Status.FAIL, "kernel log"),
    ]


def test_a_device_without_counters_beside_counted_ones_has_no_aer_and_is_left_out() -> None:
    other = gpu(None, "0000:19:00.0")
    results = pcie_aer(node(ENABLED, gpu(AerCounts(0, 0, 0)), other))
    assert [r.subject for r in results] == [GPU]


def test_without_counters_a_quiet_log_passes_where_the_aer_service_runs() -> None:
    (result,) = pcie_aer(node(ENABLED, gpu()))
    assert (result.status, result.evidence["source"], result.evidence["counters"]) == (
        Status.PASS,
        "kernel log",
        {"fatal": 0, "nonfatal": 0, "correctable": 0},
    )


@pytest.mark.parametrize(
    "service",
    [
        "pcieport 0000:00:01.0: AER: enabled with IRQ 121",
        "acpi PNP0A08:00: _OSC: OS now controls [PCIeHotplug SHPCHotplug PME AER PCIeCapability LTR]",
    ],
)
def test_the_aer_service_is_seen_by_its_boot_lines(service: str) -> None:
    assert parse_aer_log(service + "\n").service
    assert not parse_aer_log(
        "acpi PNP0A08:00: _OSC: OS now controls [PCIeHotplug PME PCIeCapability]\n"
    ).service


def test_without_counters_or_an_aer_service_in_the_log_it_cannot_judge() -> None:
    (result,) = pcie_aer(node("eth0: link up\n", gpu()))
    assert result.status is Status.SKIP and "no AER statistics" in result.summary
    assert "the kernel log shows no AER service" in result.summary
    (unread,) = pcie_aer(node(None, gpu()))
    assert unread.status is Status.SKIP and "kernel log not read: needs root" in unread.summary


def test_no_device_and_no_log_error_of_one_is_nothing_to_judge() -> None:
    log = block("0000:05:00.0", driver="ahci", pci_id="1b21:1064")
    assert [r.status for r in pcie_aer(node(log))] == [Status.SKIP]


# ------------------------------------------------------------------------- what sits there


@pytest.mark.parametrize(
    ("address", "driver", "label"),
    [
        (ROOT_PORT, "pcieport", f"PCIe root port {ROOT_PORT} above GPU {GPU}"),
        (SWITCH_PORT, "pcieport", f"PCIe switch port {SWITCH_PORT} above GPU {GPU}"),
        ("0000:18:00.1", "snd_hda_intel", f"function 0000:18:00.1 of GPU {GPU}"),
        (
            "0000:3b:00.0",
            "nvidia",
            "NVIDIA device 0000:3b:00.0 (nvidia [10de:2330], as the kernel log names it)",
        ),
    ],
)
def test_a_function_is_named_by_what_sits_there(address: str, driver: str, label: str) -> None:
    log = block(address, "Uncorrectable (Non-Fatal)", driver=driver, pci_id="8086:2030")
    if driver == "nvidia":
        log = log.replace("8086:2030", "10de:2330")
    results = pcie_aer(node(log, gpu()))
    assert [r.summary for r in results if r.subject == address] == [
        f"{label}: 1 uncorrectable (non-fatal) PCIe error(s) in the kernel log since boot: "
        "transfers were lost"
    ]


def test_a_mellanox_function_the_scan_did_not_list_is_named_by_its_driver() -> None:
    log = (
        "mlx5_core 0000:5e:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)\n"
        "mlx5_core 0000:5e:00.0:    [ 0] RxErr\n"
    )
    (result,) = pcie_aer(node(log))
    assert result.summary.startswith("Mellanox device 0000:5e:00.0 (mlx5_core, as the kernel log names it)")


def test_a_function_unrelated_to_gpus_and_adapters_is_not_this_checks() -> None:
    log = block("0000:05:00.0", "Uncorrectable (Fatal)", driver="ahci", pci_id="1b21:1064")
    assert [r.subject for r in pcie_aer(node(log, gpu()))] == [GPU]


def test_a_port_above_several_devices_names_two_and_counts_the_rest() -> None:
    devices = [gpu(None, f"0000:{0x18 + i:02x}:00.0") for i in range(4)]
    log = block(ROOT_PORT, "Uncorrectable (Fatal)", driver="pcieport")
    port = next(r for r in pcie_aer(node(log, *devices)) if r.subject == ROOT_PORT)
    assert port.summary.startswith(
        f"PCIe root port {ROOT_PORT} above GPU 0000:18:00.0, GPU 0000:19:00.0 and 2 more:"
    )


# -------------------------------------------------------------------------- the probe's rules


def test_a_line_of_an_earlier_boot_is_counted_not_judged() -> None:
    earlier = block(GPU, "Uncorrectable (Fatal)")
    banner = "[    0.000000] Linux version 6.8.0-49-generic (buildd@lcy02-amd64-056) #49-Ubuntu SMP\n"
    log = parse_aer_log(earlier + banner + ENABLED)
    assert (log.devices, log.boots, log.earlier_boot_errors, log.service) == ((), 1, 1, True)
    (result,) = pcie_aer(node(earlier + banner + ENABLED, gpu()))
    assert result.status is Status.PASS
    (again,) = pcie_aer(node(earlier + banner + earlier, gpu()))
    assert again.status is Status.FAIL, "the same error after the banner is this boot's"


def test_a_message_of_an_earlier_boot_without_its_block_stays_in_that_boot() -> None:
    received = f"pcieport {ROOT_PORT}: AER: Uncorrectable (Fatal) error message received from {GPU}\n"
    log = parse_aer_log(received + "Linux version 6.8.0-49-generic\n")
    assert (log.devices, log.earlier_boot_errors) == ((), 1)


def test_journalctls_boot_separator_is_a_boot_too() -> None:
    log = parse_aer_log(block(GPU, "Uncorrectable (Fatal)") + "-- Boot 3a5f0c1e2b7d4e6f8a9b0c1d2e3f4a5b --\n")
    assert (log.devices, log.boots, log.earlier_boot_errors) == ((), 1, 1)


@pytest.mark.parametrize(
    "line",
    [
        f"nvidia {GPU}: PCIe Bus Error: severity=Catastrophic, type=Data Link Layer, (Receiver ID)",
        f"nvidia {GPU}: PCIe Bus Error: severity=Corrected",  # cut before its type
        f"pcieport {ROOT_PORT}: AER: Corrected error received: 0000:18:00",  # an address without function
    ],
)
def test_a_malformed_line_is_counted_unreadable_and_never_judged(line: str) -> None:
    log = parse_aer_log(ENABLED + line + "\n")
    assert (log.devices, log.unreadable_lines) == ((), 1)
    (result,) = pcie_aer(node(ENABLED + line + "\n", gpu()))
    assert result.status is Status.PASS and result.evidence["counters"]["correctable"] == 0


def test_an_uncorrectable_message_without_its_block_is_one_error_of_its_source() -> None:
    received = f"pcieport {ROOT_PORT}: AER: Uncorrectable (Non-Fatal) error message received from {GPU}\n"
    (device,) = parse_aer_log(received).devices
    assert (device.address, device.counts.nonfatal) == (GPU, 1)
    (twice,) = parse_aer_log(received + received).devices
    assert twice.counts.nonfatal == 2


CANT_FIND = f"pcieport {ROOT_PORT}: AER: can't find device of ID1800\n"


@pytest.mark.parametrize(
    "log",
    [
        # a correctable message alone: the kernel prints no block and counts nothing when the
        # function's status was already clear
        f"pcieport {ROOT_PORT}: AER: Multiple Corrected error received: {GPU}\n",
        f"pcieport {ROOT_PORT}: AER: Correctable error message received from {GPU}\n",
        # a source the kernel could not find, whatever the severity
        f"pcieport {ROOT_PORT}: AER: Corrected error received: {GPU}\n" + CANT_FIND,
        f"pcieport {ROOT_PORT}: AER: Uncorrected (Fatal) error received: {GPU}\n" + CANT_FIND,
    ],
)
def test_a_message_the_kernel_counted_no_error_for_counts_none(log: str) -> None:
    assert parse_aer_log(log).devices == ()


def test_newer_kernels_no_details_found_counts_none() -> None:
    line = (
        f"pcieport {ROOT_PORT}: AER: Uncorrectable (Fatal) error message received from {GPU} "
        "(no details found)\n"
    )
    assert parse_aer_log(line).devices == ()


def test_a_block_counts_once_however_many_messages_announced_it() -> None:
    log = (
        f"pcieport {ROOT_PORT}: AER: Multiple Uncorrected (Fatal) error received: {GPU}\n"
        + block(GPU, "Uncorrected (Fatal)").split("\n", 1)[1]
    )
    (device,) = parse_aer_log(log).devices
    assert device.counts.fatal == 1


def test_an_old_kernels_requester_id_is_an_address_in_the_ports_domain() -> None:
    log = "pcieport 10003:00:00.0: AER: Uncorrected (Fatal) error received: id=ae00\n"
    (device,) = parse_aer_log(log).devices
    assert (device.address, device.counts.fatal) == ("10003:ae:00.0", 1)


def test_bits_belong_to_the_block_above_them_in_its_severity() -> None:
    log = (
        "hpsa 0000:04:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
        "id=0400(Transmitter ID)\n"
        "hpsa 0000:04:00.0:   device [103c:323a] error status/mask=000011c1/00000000\n"
        "hpsa 0000:04:00.0:    [ 0] Receiver Error         (First)\n"
        "hpsa 0000:04:00.0:    [12] Replay Timer Timeout\n"
        "pcieport 0000:00:01.0: AER: Corrected error received: id=0008\n"
        "hpsa 0000:04:00.0:    [ 6] Bad TLP\n"  # after another message: no block of its own
    )
    (device,) = parse_aer_log(log).devices
    assert dict(device.counts.nonzero) == {
        "correctable:Receiver Error": 1,
        "correctable:Replay Timer Timeout": 1,
    }
    assert (device.driver, device.pci_id) == ("hpsa", "103c:323a")


def test_the_aer_prefix_of_some_kernels_and_a_syslog_prefix_are_read() -> None:
    log = (
        "Jun 03 13:30:13 e2e8468 kernel: pcieport 0000:00:1c.0: AER: PCIe Bus Error: severity=Corrected, "
        "type=Data Link Layer, (Transmitter ID)\n"
        "Jun 03 13:30:13 e2e8468 kernel: pcieport 0000:00:1c.0: AER: device [8086:a33c] "
        "error status/mask=00001000/00002000\n"
        "Jun 03 13:30:13 e2e8468 kernel: pcieport 0000:00:1c.0: AER: [12] Timeout\n"
    )
    (device,) = parse_aer_log(log).devices
    assert (device.driver, device.pci_id, dict(device.counts.nonzero)) == (
        "pcieport",
        "8086:a33c",
        {"correctable:Timeout": 1},
    )


def test_the_evidence_keeps_the_first_lines_of_a_function() -> None:
    (result,) = pcie_aer(node(block(GPU) * 7, gpu()))
    assert len(result.evidence["lines"]) == 5
    assert result.evidence["lines"][0].startswith(f"nvidia {GPU}: PCIe Bus Error")


PIECES = st.sampled_from(
    [
        "pcieport 0000:00:01.0: ",
        "nvidia 0000:18:00.0: ",
        "AER: ",
        "PCIe Bus Error: severity=",
        "Corrected",
        "Uncorrectable (Fatal)",
        ", type=Data Link Layer, (Receiver ID)",
        "Multiple ",
        " error received: ",
        "id=",
        "ffff",
        "0000:18:00.0",
        "   [12] Timeout",
        "device [10de:2330] error status/mask=",
        "Linux version 6",
        "-- Boot 1 --",
        "\n",
        " ",
        "\x00",
        "٣",
    ]
)


@settings(max_examples=300)
@given(st.lists(PIECES, max_size=40).map("".join))
def test_the_probe_never_raises_and_the_check_always_answers(text: str) -> None:
    log = parse_aer_log(text)
    assert all(
        sum((d.counts.fatal or 0, d.counts.nonfatal or 0, d.counts.correctable or 0)) > 0 for d in log.devices
    )
    results = pcie_aer(replace(node(text, gpu()), previous={}))
    assert results and all(r.status in set(Status) for r in results)


# ------------------------------------------------------------------ the one search that skips lines
EVERY_LINE = re.compile("")  # the reading without the skip: every line meets every pattern
KERNEL_LOGS = [s.body for kind in ("aer_kernel_log", "kernel_log", "sxid") for s in samples(kind)]


def _both_readings(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    fast = parse_aer_log(text)
    with monkeypatch.context() as patch:
        patch.setattr(aer_log, "_MAY_MATTER", EVERY_LINE)
        every = parse_aer_log(text)
    return fast, every


@pytest.mark.parametrize("index", range(len(KERNEL_LOGS)))
def test_skipping_lines_no_pattern_could_read_changes_nothing_on_published_logs(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, every = _both_readings(KERNEL_LOGS[index], monkeypatch)
    assert fast == every


AER_WORDS = st.sampled_from(
    [
        "Linux version 6.8.0-45-generic (buildd@lcy02) #45-Ubuntu",
        "-- Boot 1a2b3c --",
        "-- Reboot --",
        "pcieport 0000:00:01.1: AER: enabled with IRQ 29",
        "acpi PNP0A08:00: _OSC: OS now controls [PCIeHotplug PME AER PCIeCapability]",
        "pcieport 0000:40:01.1: AER: Corrected error message received from 0000:41:00.0",
        "pcieport 0000:40:01.1: AER: Multiple Uncorrected (Non-Fatal) error received: 0000:41:00.0",
        "pcieport 0000:40:01.1: AER: Uncorrected (Fatal) error received: id=4100, no details found",
        "nvidia 0000:41:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
        "nvidia 0000:41:00.0:pcie02: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Data Link Layer,",
        "0000:41:00.0:   device [10de:2330] error status/mask=00000001/0000e000",
        "0000:41:00.0:    [ 0] RxErr                  (First)",
        "0000:41:00.0: AER: can't find device of ID4100",
        "mlx5_core 0000:c1:00.0: PCIe Bus Error: malformed",
        "usb 1-1: new high-speed USB device number 2 using xhci_hcd",
        "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode",
        "pci 0000:00:01.0: [1022:1483] type 01 class 0x060400",
    ]
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(AER_WORDS, max_size=14))
def test_skipping_lines_no_pattern_could_read_changes_nothing_on_generated_logs(lines: list[str]) -> None:
    text = "\n".join(lines)
    fast = parse_aer_log(text)
    original, aer_log._MAY_MATTER = aer_log._MAY_MATTER, EVERY_LINE
    try:
        every = parse_aer_log(text)
    finally:
        aer_log._MAY_MATTER = original
    assert fast == every
