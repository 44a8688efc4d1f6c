"""Idle means idle by every reading (issue 44): published `nvidia-smi -q` outputs of idle GPUs
(tests/fixtures/real/nvidia_smi_q_idle/), some of them at P8 with 0 % utilization and no process while
the driver's reason mask says "Idle: Not Active" beside "SW Power Cap: Active". nvidia-smi prints what
NVML answers, so each GPU's readings become the NVML snapshot dltune's probe would take (the reason
mask from the "Clocks Event Reasons" lines, utilization, the compute processes, the PCIe link); gpu.pcie
then judges it. A lowered link on such a GPU is the power saving of an idle card, never "under load"."""

from __future__ import annotations

import re

import pytest

from dltune.checks.gpu import idle_reading, pcie
from dltune.model import Status
from dltune.snapshot import Gpu, NvmlState, Snapshot
from tests.real_corpus import Sample, samples

# nvidia-smi's names of the clock-event reasons and NVML's bits (nvmlClocksEventReason*).
REASON_BITS = {
    "Idle": 0x1,
    "Applications Clocks Setting": 0x2,
    "SW Power Cap": 0x4,
    "HW Slowdown": 0x8,
    "Sync Boost": 0x10,
    "SW Thermal Slowdown": 0x20,
    "HW Thermal Slowdown": 0x40,
    "HW Power Brake Slowdown": 0x80,
    "Display Clock Setting": 0x100,
}
IDLE_SAMPLES = [s for s in samples("nvidia_smi_q_idle")]


def _field(block: str, pattern: str) -> str | None:
    found = re.search(pattern, block, re.M)
    return found.group(1) if found else None


def gpus_of(sample: Sample) -> list[Gpu]:
    """Each GPU block of the output ("GPU 00000000:4F:00.0" to the next) as NVML's readings."""
    blocks = re.split(r"^GPU (?=[0-9A-Fa-f]{8}:)", sample.body, flags=re.M)[1:]
    gpus = []
    for index, block in enumerate(blocks):
        reasons = re.search(r"Clocks (?:Event|Throttle) Reasons\n((?:\s{8,}.*\n)+)", block)
        mask = None
        if reasons:
            mask = 0
            for line in reasons.group(1).splitlines():
                name, _, state = (part.strip() for part in line.partition(":"))
                if state == "Active" and name in REASON_BITS:
                    mask |= REASON_BITS[name]
        utilization = _field(block, r"^\s+Utilization\n\s+Gpu\s+: (\d+) %")
        processes = _field(block, r"^\s+Processes\s+: (None)\s*$")
        gen = re.search(r"PCIe Generation\n\s+Max\s+: (\d)\n\s+Current\s+: (\d)", block)
        width = re.search(r"Link Width\n\s+Max\s+: (\d+)x\n\s+Current\s+: (\d+)x", block)
        gpus.append(
            Gpu(
                index=index,
                name=_field(block, r"^\s+Product Name\s+: (.+)$"),
                clock_event_reasons=mask,
                utilization_percent=None if utilization is None else int(utilization),
                compute_pids=() if processes == "None" else None,
                pcie_gen_max=int(gen.group(1)) if gen else None,
                pcie_gen=int(gen.group(2)) if gen else None,
                pcie_width_max=int(width.group(1)) if width else None,
                pcie_width=int(width.group(2)) if width else None,
            )
        )
    return gpus


def test_the_corpus_holds_idle_cards_whose_idle_reason_is_not_set() -> None:
    """The class the issue names: at least three boards where the mask's idle bit is off on an idle
    card (the A10 of the issue among them)."""
    inconsistent = {
        gpu.name
        for sample in IDLE_SAMPLES
        for gpu in gpus_of(sample)
        if gpu.clock_event_reasons is not None and not gpu.clock_event_reasons & REASON_BITS["Idle"]
    }
    assert {"NVIDIA A10", "NVIDIA A40", "NVIDIA RTX A6000"} <= inconsistent, inconsistent


@pytest.mark.parametrize("sample", IDLE_SAMPLES, ids=str)
def test_every_gpu_of_a_published_idle_output_reads_idle_and_its_lowered_link_is_not_under_load(
    sample: Sample,
) -> None:
    assert sample.expect.startswith("idle: "), sample.expect
    gpus = gpus_of(sample)
    assert gpus, "no GPU block read"
    for gpu in gpus:
        idle, reading = idle_reading(gpu)
        assert idle is True, (gpu.name, reading)
        (result,) = pcie(Snapshot(root="/", nvml=NvmlState(True, gpus=(gpu,))))
        assert "under load" not in result.summary and "trained narrow" not in result.summary
        narrow = gpu.pcie_width is not None and gpu.pcie_width < (gpu.pcie_width_max or 0)
        # A width below its maximum at idle is rechecked under load (warn), never a fail.
        assert result.status is (Status.WARN if narrow else Status.PASS), (gpu.name, result.summary)
        if gpu.pcie_gen is not None and gpu.pcie_gen_max is not None and gpu.pcie_gen < gpu.pcie_gen_max:
            assert f"idle by {reading}" in result.summary, result.summary


def test_the_a10_of_the_issue_is_idle_by_utilization_and_processes_and_says_so() -> None:
    (a10,) = gpus_of(next(s for s in IDLE_SAMPLES if s.name == "gls_a10_p8_gen1_swpowercap"))
    assert a10.clock_event_reasons == REASON_BITS["SW Power Cap"] and (a10.pcie_gen, a10.pcie_gen_max) == (
        1,
        4,
    )
    (result,) = pcie(Snapshot(root="/", nvml=NvmlState(True, gpus=(a10,))))
    assert result.summary == (
        "Gen1 x16 (max Gen4 x16) (idle by utilization 0 % and no compute process (the driver's idle reason "
        "is not set): idle GPUs lower the generation to save power)"
    )
    assert (
        result.evidence["idle_by"]
        == "utilization 0 % and no compute process (the driver's idle reason is not set)"
    )


NOTHING = "neither utilization, the compute processes nor the idle reason reported"
LINK = {"pcie_gen": 1, "pcie_gen_max": 4, "pcie_width": 16, "pcie_width_max": 16}


@pytest.mark.parametrize(
    ("readings", "idle", "reading"),
    [
        ({"utilization_percent": 1, "clock_event_reasons": 0x1}, False, "utilization 1 %"),
        ({"compute_pids": (4242,), "utilization_percent": 0}, False, "1 compute process(es)"),
        ({"utilization_percent": 97, "compute_pids": (1, 2)}, False,
         "utilization 97 % and 2 compute process(es)"),
        ({"clock_event_reasons": 0x1}, True, "the driver's idle clock-event reason"),
        ({"clock_event_reasons": 0x4, "utilization_percent": 0}, True,
         "utilization 0 % (the driver's idle reason is not set)"),
        ({"compute_pids": ()}, True, "no compute process"),
        ({"clock_event_reasons": 0x4}, None, NOTHING),
        ({}, None, NOTHING),
    ],
)  # fmt: skip
def test_load_needs_evidence_of_load_and_the_reading_that_decided_is_named(
    readings: dict[str, object], idle: bool | None, reading: str
) -> None:
    gpu = Gpu(index=0, **LINK, **readings)  # type: ignore[arg-type]
    assert idle_reading(gpu) == (idle, reading)
    (result,) = pcie(Snapshot(root="/", nvml=NvmlState(True, gpus=(gpu,))))
    assert result.status is (Status.WARN if idle is False else Status.PASS)
    if idle is False:
        assert result.summary == f"link below its generation under load ({reading}): Gen1 x16 (max Gen4 x16)"


@pytest.mark.parametrize(
    ("readings", "status", "summary"),
    [
        ({"utilization_percent": 0, "compute_pids": ()}, Status.WARN,
         "link narrower than its maximum while idle (idle by utilization 0 % and no compute process): "
         "Gen1 x8 (max Gen4 x16)"),
        ({"utilization_percent": 60}, Status.FAIL, "link trained narrow: Gen1 x8 (max Gen4 x16)"),
        ({}, Status.FAIL, "link trained narrow: Gen1 x8 (max Gen4 x16)"),
    ],
)  # fmt: skip
def test_a_narrow_width_fails_under_load_or_unknown_load_and_is_rechecked_when_idle(
    readings: dict[str, object], status: Status, summary: str
) -> None:
    gpu = Gpu(index=0, pcie_gen=1, pcie_gen_max=4, pcie_width=8, pcie_width_max=16, **readings)  # type: ignore[arg-type]
    (result,) = pcie(Snapshot(root="/", nvml=NvmlState(True, gpus=(gpu,))))
    assert (result.status, result.summary) == (status, summary)
