"""Pinned host copies judged against the GPU's PCIe link (dltune.bench.judge.judge_host_link) and the
link read from NVML (dltune.bench.measure.pcie_link, NVML stubbed at its Python API: no GPU here).
Real figures: dltune's runs on an H100 SXM and an H200 (tests/fixtures/real/bench/), whose
`nvidia-smi -q` says "PCIe Generation Max: 5, Current: 5; Link Width Max: 16x, Current: 16x"."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import pytest

from dltune.bench import measure
from dltune.bench.judge import (
    HOST_LINK_WARN,
    PCIE_LANE_GB_S,
    Bandwidth,
    PcieLink,
    judge_host_link,
    judge_host_transfers,
)
from dltune.model import Status
from tests.conftest import FIXTURES
from tests.real_corpus import load

REAL = FIXTURES / "real/bench"


def _real_link(kind: str) -> PcieLink:
    text = (REAL / f"{kind}_2026-11-26/nvidia-smi-q.txt").read_text()
    gen = re.search(r"PCIe Generation\s+Max\s+:\s+(\d+)\s+Current\s+:\s+(\d+)", text)
    width = re.search(r"Link Width\s+Max\s+:\s+(\d+)x\s+Current\s+:\s+(\d+)x", text)
    assert gen and width
    return PcieLink(int(gen.group(2)), int(width.group(2)), int(gen.group(1)), int(width.group(1)))


def _real_transfers(kind: str) -> list[Bandwidth]:
    results = json.loads((REAL / f"{kind}_2026-11-26/bench.json").read_text())["results"]
    return [
        Bandwidth(
            r["subject"].rsplit(":", 1)[0], r["evidence"]["name"], r["evidence"]["kind"], r["metrics"]["gb_s"]
        )
        for r in results
        if r["id"] == "bench.host_transfer"
    ]


@pytest.mark.parametrize("kind", ["h100", "h200"])
def test_healthy_cards_pass_on_their_gen5_x16_links(kind: str) -> None:
    link = _real_link(kind)
    assert (link.max_gen, link.max_width) == (5, 16)
    transfers = _real_transfers(kind)
    results = [r for r in judge_host_transfers(transfers, {"cuda:0": link}) if r.id == "bench.host_link"]
    # Pinned copies only, each way: pageable copies measure the host's memory.
    assert sorted(r.subject for r in results) == ["cuda:0:d2h pinned", "cuda:0:h2d pinned"]
    for r in results:
        assert r.status is Status.PASS, r.summary
        assert 0.85 < r.metrics["fraction_of_link"] < 0.88 and "of a Gen5 x16 link (63.0 GB/s)" in r.summary


@pytest.mark.parametrize(("gen", "line_gb_s"), [(4, 21.0), (5, 48.0)])
def test_the_lines_are_azures_21_and_48_gb_s_on_x16(gen: int, line_gb_s: float) -> None:
    link = PcieLink(gen, 16, gen, 16)
    assert PCIE_LANE_GB_S[gen] * 16 * HOST_LINK_WARN[gen] == pytest.approx(line_gb_s, rel=0.01)
    above = judge_host_link(Bandwidth("cuda:0", "GPU", "h2d pinned", line_gb_s * 1.01), link)
    below = judge_host_link(Bandwidth("cuda:0", "GPU", "h2d pinned", line_gb_s * 0.99), link)
    assert (above.status, below.status) == (Status.PASS, Status.WARN)
    assert below.remedy and "PCIe link" in below.remedy


def test_a_link_trained_narrower_than_it_can_is_judged_by_what_it_can_and_named() -> None:
    """A Gen5 x16 GPU whose link came up x8: its copy (26 GB/s, right for x8) is short of what the GPU
    and its slot can do, and the summary says the link runs x8."""
    result = judge_host_link(Bandwidth("cuda:3", "GPU", "h2d pinned", 26.0), PcieLink(5, 8, 5, 16))
    assert result.status is Status.WARN
    assert "of a Gen5 x16 link" in result.summary and "the link runs Gen5 x8" in result.summary


def test_an_idle_generation_drop_is_not_a_finding() -> None:
    """NVML's current generation falls at idle (Gen1 on a resting H100): the maximum judges the copy."""
    result = judge_host_link(Bandwidth("cuda:0", "GPU", "d2h pinned", 54.0), PcieLink(1, 16, 5, 16))
    assert result.status is Status.PASS and "Gen5 x16" in result.summary


@pytest.mark.parametrize(
    "link", [None, PcieLink(None, None), PcieLink(7, 16, 7, 16), PcieLink(5, None, 5, None)]
)
def test_no_known_link_is_a_skip_that_says_so(link: PcieLink | None) -> None:
    result = judge_host_link(Bandwidth("cuda:0", "GPU", "h2d pinned", 54.0), link)
    assert result.status is Status.SKIP and "no PCIe link" in result.summary


def test_without_links_the_transfers_are_judged_as_before() -> None:
    transfers = _real_transfers("h200")
    assert not [r for r in judge_host_transfers(transfers) if r.id == "bench.host_link"]


class _NVMLError(Exception):
    pass


def _nvml(fields: dict[str, Any]) -> SimpleNamespace:
    def answer(name: str) -> Any:
        def call(handle: Any) -> int:
            value = fields[name]
            if isinstance(value, Exception):
                raise value
            return int(value)

        return call

    calls: list[str] = []
    return SimpleNamespace(
        NVMLError=_NVMLError,
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByUUID=lambda uuid: calls.append(uuid.decode()) or "handle",
        nvmlDeviceGetCurrPcieLinkGeneration=answer("gen"),
        nvmlDeviceGetCurrPcieLinkWidth=answer("width"),
        nvmlDeviceGetMaxPcieLinkGeneration=answer("max_gen"),
        nvmlDeviceGetMaxPcieLinkWidth=answer("max_width"),
        calls=calls,
    )


def _torch(uuid: str | None) -> SimpleNamespace:
    props = SimpleNamespace(uuid=uuid)
    return SimpleNamespace(
        device=lambda name: name, cuda=SimpleNamespace(get_device_properties=lambda device: props)
    )


def test_the_link_is_read_by_uuid_and_a_missing_field_leaves_the_others() -> None:
    nvml = _nvml({"gen": 1, "width": 16, "max_gen": 5, "max_width": _NVMLError("not supported")})
    link = measure.pcie_link(_torch("3f2e-aa"), "cuda:0", nvml)
    assert link == PcieLink(1, 16, 5, None)
    assert nvml.calls == ["init", "GPU-3f2e-aa", "shutdown"]


@pytest.mark.parametrize("uuid", [None, "MIG-1234"])
def test_no_uuid_or_a_mig_slice_has_no_link(uuid: str | None) -> None:
    assert measure.pcie_link(_torch(uuid), "cuda:0", _nvml({})) is None


def test_nvml_refusing_the_device_is_no_link() -> None:
    nvml = _nvml({})

    def refuse(uuid: bytes) -> None:
        raise _NVMLError("no permission")

    nvml.nvmlDeviceGetHandleByUUID = refuse
    assert measure.pcie_link(_torch("GPU-1"), "cuda:0", nvml) is None
    assert nvml.calls == ["init", "shutdown"]


PUBLISHED = FIXTURES / "real/interconnect"
P100, A100, H100 = (
    f"host-link-{name}.txt"
    for name in ("gearshifft-82-p100-numa", "nvbandwidth-42-a100", "nvbandwidth-24-h100")
)


def _figures(text: str, after: str, scale: float) -> list[float]:
    """The bandwidth figures of one direction in a published bandwidthTest or nvbandwidth output."""
    part = re.split(r"\n(?:\$ |> Running|Running (?:host|device))", text.split(after, 1)[1])[0]
    rows = [line.split() for line in part.splitlines() if re.match(r"^\s*\d+\s+\d", line)]
    # A row is a source and its figures (MB/s or GB/s, with decimals); nvbandwidth's column header
    # of GPU numbers has none.
    return [float(value) * scale for row in rows for value in row[1:] if "." in value]


@pytest.mark.parametrize(
    ("sample", "link", "direction", "scale", "expected"),
    [
        # bandwidthTest reports MB/s: 12150.7 on the GPU's own socket passes, 3783.4 from the other fails.
        (
            "host-link-gearshifft-82-p100-numa.txt",
            PcieLink(3, 16, 3, 16),
            "numactl -m0 -N0",
            1e-3,
            [Status.PASS] * 2,
        ),
        (
            "host-link-gearshifft-82-p100-numa.txt",
            PcieLink(3, 16, 3, 16),
            "numactl -m1 -N1",
            1e-3,
            [Status.WARN] * 2,
        ),
        (
            "host-link-nvbandwidth-42-a100.txt",
            PcieLink(4, 16, 4, 16),
            "host_to_device_memcpy_sm.",
            1.0,
            [Status.PASS],
        ),
        # "they should be close values": host to device 35 of 63 GB/s on every GPU, back 52.8.
        (
            "host-link-nvbandwidth-24-h100.txt",
            PcieLink(5, 16, 5, 16),
            "Running host_to_device",
            1.0,
            [Status.WARN] * 8,
        ),
        (
            "host-link-nvbandwidth-24-h100.txt",
            PcieLink(5, 16, 5, 16),
            "Running device_to_host",
            1.0,
            [Status.PASS] * 8,
        ),
    ],
)
def test_published_copies_get_the_verdict_their_authors_gave(
    sample: str, link: PcieLink, direction: str, scale: float, expected: list[Status]
) -> None:
    text = load(PUBLISHED / sample).body
    figures = _figures(text, direction, scale)
    verdicts = [
        judge_host_link(Bandwidth("cuda:0", "GPU", "h2d pinned", gb_s), link).status for gb_s in figures
    ]
    assert verdicts == expected, figures
