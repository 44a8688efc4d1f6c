"""`dltune report` names a GPU whose bench figure is far below the median of the same figure over every
GPU of its model in the fleet (dltune.fleet.cluster.behind_the_fleet): what a node's comparison of its own
GPUs cannot see (the whole node slow). The fleet here is built from real bench envelopes of an H200
and an H100 (tests/fixtures/real/bench/, dltune's runs of 2026-11-26), copied to more hosts with their
figures scaled: the judgement's input is what a real run writes."""

from __future__ import annotations

import copy
import io
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from dltune.fleet import cluster, node_files
from dltune.fleet.cluster import (
    FLEET_BEHIND,
    FLEET_MIN_NODES,
    behind_the_fleet,
    merged_json,
    render_html,
    render_summary,
)
from tests.conftest import FIXTURES

REAL = FIXTURES / "real/bench"
# When the real runs were current (their envelopes say valid_until): a stale report is never compared.
NOW = datetime(2026, 11, 26, 22, tzinfo=timezone.utc)


def load(paths: list[Path]) -> list[cluster.NodeReport]:
    return node_files.load(paths, now=NOW)


def _real(kind: str) -> dict[str, Any]:
    return json.loads((REAL / f"{kind}_2026-11-26/bench.json").read_text())


def _scaled(envelope: dict[str, Any], host: str, factor: float, only: str | None = None) -> dict[str, Any]:
    """The real envelope as another host's, its bench figures times ``factor`` (those of check ``only``)."""
    data = copy.deepcopy(envelope)
    data["host"] = host
    for r in data["results"]:
        if only in (None, r["id"]):
            for key in ("tflops", "gb_s"):
                if key in r.get("metrics", {}):
                    r["metrics"][key] *= factor
    return data


def _fleet(tmp_path: Path, factors: dict[str, float], kind: str = "h200", only: str | None = None) -> Path:
    real = _real(kind)
    for host, factor in factors.items():
        (tmp_path / f"{host}.bench.json").write_text(json.dumps(_scaled(real, host, factor, only)))
    return tmp_path


def test_a_node_behind_its_peers_is_named_with_its_figures_and_the_median(tmp_path: Path) -> None:
    nodes = load([_fleet(tmp_path, {"gpu01": 1.0, "gpu02": 0.98, "gpu03": 1.01, "gpu04": 0.80})])
    behind = behind_the_fleet(nodes)
    assert {b.host for b in behind} == {"gpu04"}
    figures = {b.figure for b in behind}
    # Every GPU-bound figure of the real run; pageable host copies are not compared.
    assert {"matmul bf16", "matmul fp16", "memory device copy", "transfer h2d pinned"} <= {
        f.replace("host_transfer", "transfer") for f in figures
    }
    assert not any("pageable" in f for f in figures)
    bf16 = next(b for b in behind if b.figure == "matmul bf16")
    real = next(r for r in _real("h200")["results"] if r["subject"] == "cuda:0:bf16")["metrics"]["tflops"]
    assert bf16.value == pytest.approx(real * 0.80) and bf16.median == pytest.approx(real * 0.99)
    assert bf16.gpu == "NVIDIA H200" and bf16.nodes == 4 and bf16.device == "cuda:0"
    assert bf16.said().startswith("gpu04 cuda:0 matmul bf16: ") and "19% below the median" in bf16.said()


@pytest.mark.parametrize(
    ("factor", "named"),
    [(1.0 - FLEET_BEHIND + 0.002, False), (1.0 - FLEET_BEHIND - 0.002, True)],
)
def test_the_line_is_ten_percent_below_the_median(tmp_path: Path, factor: float, named: bool) -> None:
    """Four healthy nodes and one at the factor, matmul only: the median is the healthy figure."""
    fleet = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0, "slow": factor}
    behind = behind_the_fleet(load([_fleet(tmp_path, fleet, only="bench.matmul")]))
    assert bool([b for b in behind if b.host == "slow"]) is named
    assert all(b.host == "slow" for b in behind)


def test_fewer_nodes_than_the_minimum_name_no_one(tmp_path: Path) -> None:
    hosts = {f"n{i}": 1.0 for i in range(FLEET_MIN_NODES - 1)}
    hosts["n0"] = 0.5
    assert behind_the_fleet(load([_fleet(tmp_path, hosts)])) == []
    hosts[f"n{FLEET_MIN_NODES - 1}"] = 1.0
    assert {b.host for b in behind_the_fleet(load([_fleet(tmp_path, hosts)]))} == {"n0"}


def test_models_are_compared_only_with_their_own_kind(tmp_path: Path) -> None:
    """Three H200s and three H100s: an H100 is slower than an H200 on memory and is not behind."""
    _fleet(tmp_path, {"h200-1": 1.0, "h200-2": 1.0, "h200-3": 1.0})
    _fleet(tmp_path, {"h100-1": 1.0, "h100-2": 1.0, "h100-3": 0.7}, kind="h100")
    behind = behind_the_fleet(load([tmp_path]))
    assert {b.host for b in behind} == {"h100-3"} and {b.gpu for b in behind} == {"NVIDIA H100 80GB HBM3"}


def test_the_report_json_html_and_terminal_name_the_laggard(tmp_path: Path) -> None:
    nodes = load([_fleet(tmp_path, {"gpu01": 1.0, "gpu02": 1.0, "gpu03": 1.0, "gpu04": 0.5})])
    merged = json.loads(merged_json(nodes, "2026-11-27T00:00:00Z"))
    assert {b["host"] for b in merged["behind_fleet"]} == {"gpu04"}
    first = merged["behind_fleet"][0]
    assert first["behind"] == pytest.approx(0.5, abs=0.01) and first["nodes"] == 4
    assert "gpu04 cuda:0 matmul bf16" in render_html(nodes, "now")
    out = io.StringIO()
    render_summary(nodes, Console(file=out, width=160))
    assert "behind the fleet: gpu04 cuda:0" in out.getvalue()
    healthy = (
        load([_fleet(tmp_path / "ok", {"a": 1.0, "b": 1.0, "c": 1.0})])
        if (tmp_path / "ok").mkdir() is None
        else []
    )
    assert json.loads(merged_json(healthy, "now"))["behind_fleet"] == []
    assert "no GPU more than 10% below" in render_html(healthy, "now")


def test_stale_reports_are_never_compared(tmp_path: Path) -> None:
    """A bench past its valid_until says nothing about the node now: it neither counts in the median
    nor is named."""
    fleet = _fleet(tmp_path, {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.5})
    later = node_files.load([fleet], now=datetime(2026, 11, 27, 12, tzinfo=timezone.utc))
    assert all(node.stale for node in later) and behind_the_fleet(later) == []
