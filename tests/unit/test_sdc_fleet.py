"""`dltune report` compares bench.sdc across the fleet (issue 45): nodes whose replay key is the same
must compute the same digests. A node whose GPUs agree with each other but not with the majority of
the nodes with its key is named (its own bench.sdc passed: only the fleet sees it); on a node whose
GPUs disagree, the fleet's majority names the GPU that differs. The nodes' envelopes are what `dltune
bench` writes: digests of the real replay on CPU (PyTorch, small), one of them with a bit flipped by
the seam's function, judged by bench.judge and rendered by report.render_json; the GPUs are named as
data (no GPU here)."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from dltune.bench import measure
from dltune.bench.judge import SdcRun, judge_sdc
from dltune.fleet import cluster, node_files
from dltune.fleet.cluster import SDC_NONE, merged_json, render_html, render_summary, sdc_outliers
from dltune.outputs.report import render_json

torch = pytest.importorskip("torch")

NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
H200 = "NVIDIA H200"
SHAPE = measure.SdcShape(batch=16, inputs=16, hidden=32, outputs=4)
STEPS = 5
KEY = {
    "model": SHAPE.model("float32"),
    "steps": STEPS,
    "precision": "float32",
    "torch": "2.6.0+cu124",
    "cuda": "12.4",
    "cublas": "12.4.5.8",
    "driver": "570.124.06",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}


@pytest.fixture(scope="module")
def replays() -> dict[str, tuple[str, ...]]:
    """The real replay's digests, clean and with the lowest bit of a weight flipped after step 3."""
    return {
        "clean": tuple(measure.sdc_replay(torch, "cpu", steps=STEPS, shape=SHAPE)),
        "flipped": tuple(measure.sdc_replay(torch, "cpu", steps=STEPS, shape=SHAPE, flip_after=3)),
        "other": tuple(measure.sdc_replay(torch, "cpu", steps=STEPS, shape=SHAPE, flip_after=1)),
    }


def _node(
    directory: Path,
    host: str,
    traces: list[tuple[str, ...]],
    key: dict[str, Any] | None = None,
    gpu: str = H200,
) -> None:
    runs = [SdcRun(f"cuda:{i}", gpu, trace) for i, trace in enumerate(traces)]
    results = judge_sdc(runs, key or KEY)
    (directory / f"{host}.bench.json").write_text(render_json(results, host, NOW))


def _load(directory: Path, now: datetime = NOW) -> list[cluster.NodeReport]:
    return node_files.load([directory], now=now)


def test_a_node_whose_gpus_agree_but_not_with_the_fleet_is_named_with_its_step(
    tmp_path: Path, replays: dict[str, tuple[str, ...]]
) -> None:
    clean, flipped = replays["clean"], replays["flipped"]
    for host in ("gpu01", "gpu02", "gpu03"):
        _node(tmp_path, host, [clean] * 4)
    _node(tmp_path, "gpu04", [flipped] * 4)  # its own bench.sdc passes: its GPUs agree
    nodes = _load(tmp_path)
    assert next(r for r in nodes[3].results if r["id"] == "bench.sdc")["status"] == "pass"
    (odd,) = sdc_outliers(nodes)
    assert (odd.host, odd.gpu, odd.agree, odd.step) == ("gpu04", H200, True, 3)
    assert odd.devices == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert (odd.agreeing, odd.nodes) == (3, 4)
    assert odd.digest == flipped[-1] and odd.fleet_digest == clean[-1]
    assert odd.said().startswith(f"gpu04: its 4 {H200} GPU(s) agree with each other, but not with 3 of the 4")
    assert "from step 3" in odd.said()


def test_the_report_json_html_and_terminal_name_the_node(
    tmp_path: Path, replays: dict[str, tuple[str, ...]]
) -> None:
    for host in ("gpu01", "gpu02"):
        _node(tmp_path, host, [replays["clean"]] * 2)
    _node(tmp_path, "gpu03", [replays["flipped"]] * 2)
    nodes = _load(tmp_path)
    (entry,) = json.loads(merged_json(nodes, "now"))["sdc_fleet"]
    assert entry == {
        "host": "gpu03",
        "gpu": H200,
        "devices": ["cuda:0", "cuda:1"],
        "agree": True,
        "digest": replays["flipped"][-1],
        "fleet_digest": replays["clean"][-1],
        "agreeing": 2,
        "nodes": 3,
        "step": 3,
    }
    page = render_html(nodes, "now")
    assert "Silent data corruption across the fleet" in page and "gpu03: its 2 NVIDIA H200 GPU(s)" in page
    out = io.StringIO()
    render_summary(nodes, Console(file=out, width=200))
    assert "replay differs from the fleet's: gpu03: its 2" in out.getvalue()


def test_a_fleet_that_agrees_names_no_one(tmp_path: Path, replays: dict[str, tuple[str, ...]]) -> None:
    for host in ("gpu01", "gpu02", "gpu03"):
        _node(tmp_path, host, [replays["clean"]] * 2)
    nodes = _load(tmp_path)
    assert sdc_outliers(nodes) == [] and json.loads(merged_json(nodes, "now"))["sdc_fleet"] == []
    assert SDC_NONE in render_html(nodes, "now")


@pytest.mark.parametrize(
    "changed",
    [
        {"driver": "580.65.06"},
        {"cublas": "12.8.4.1"},
        {"CUBLAS_WORKSPACE_CONFIG": ":16:8"},
        {"torch": "2.7.0"},
    ],
)
def test_only_nodes_with_the_same_key_are_compared(
    tmp_path: Path, replays: dict[str, tuple[str, ...]], changed: dict[str, str]
) -> None:
    for host in ("gpu01", "gpu02"):
        _node(tmp_path, host, [replays["clean"]] * 2)
    _node(tmp_path, "gpu03", [replays["flipped"]] * 2, key={**KEY, **changed})
    assert sdc_outliers(_load(tmp_path)) == []


def test_gpu_models_are_compared_only_with_their_own(
    tmp_path: Path, replays: dict[str, tuple[str, ...]]
) -> None:
    for host in ("a", "b"):
        _node(tmp_path, host, [replays["clean"]] * 2)
    _node(tmp_path, "c", [replays["flipped"]] * 2, gpu="NVIDIA H100 80GB HBM3")
    assert sdc_outliers(_load(tmp_path)) == []


def test_two_nodes_that_differ_have_no_majority_and_both_are_named(
    tmp_path: Path, replays: dict[str, tuple[str, ...]]
) -> None:
    _node(tmp_path, "a", [replays["clean"]] * 2)
    _node(tmp_path, "b", [replays["flipped"]] * 2)
    named = sdc_outliers(_load(tmp_path))
    assert [(o.host, o.fleet_digest, o.agreeing, o.step) for o in named] == [
        ("a", None, 0, 3),
        ("b", None, 0, 3),
    ]
    assert "have no majority (they part from step 3)" in named[0].said()


def test_a_majority_is_more_than_half_of_the_nodes(
    tmp_path: Path, replays: dict[str, tuple[str, ...]]
) -> None:
    """Two against two: no majority, all four named; a fifth node with the first two makes one."""
    for host, trace in (("a", "clean"), ("b", "clean"), ("c", "flipped"), ("d", "other")):
        _node(tmp_path, host, [replays[trace]] * 2)
    _node(tmp_path, "e", [replays["flipped"]] * 2)
    assert {o.host for o in sdc_outliers(_load(tmp_path))} == {"a", "b", "c", "d", "e"}
    _node(tmp_path, "f", [replays["clean"]] * 2)
    _node(tmp_path, "g", [replays["clean"]] * 2)
    named = sdc_outliers(_load(tmp_path))
    assert {o.host: o.step for o in named} == {"c": 3, "d": 1, "e": 3}


def test_the_fleet_names_the_gpu_of_a_two_gpu_node_with_no_majority_of_its_own(
    tmp_path: Path, replays: dict[str, tuple[str, ...]]
) -> None:
    """Two GPUs that differ: the node's own bench.sdc fails naming both; the fleet says which."""
    for host in ("gpu01", "gpu02"):
        _node(tmp_path, host, [replays["clean"]] * 2)
    _node(tmp_path, "gpu03", [replays["clean"], replays["flipped"]])
    nodes = _load(tmp_path)
    own = next(r for r in next(n for n in nodes if n.host == "gpu03").results if r["id"] == "bench.sdc")
    assert own["status"] == "fail" and set(own["evidence"]["diverged"]) == {"cuda:0", "cuda:1"}
    (odd,) = sdc_outliers(nodes)
    assert (odd.host, odd.devices, odd.agree, odd.step, odd.agreeing, odd.nodes) == (
        "gpu03",
        ["cuda:1"],
        False,
        3,
        2,
        2,
    )
    assert odd.said().startswith("gpu03 cuda:1 (NVIDIA H200; the node's GPUs disagree): differs from step 3")


def test_one_node_is_not_enough_to_say_which_gpu_of_another_differs(
    tmp_path: Path, replays: dict[str, tuple[str, ...]]
) -> None:
    _node(tmp_path, "gpu01", [replays["clean"]] * 2)
    _node(tmp_path, "gpu02", [replays["clean"], replays["flipped"]])
    assert sdc_outliers(_load(tmp_path)) == []


def test_cpu_runs_and_stale_reports_are_not_compared(
    tmp_path: Path, replays: dict[str, tuple[str, ...]]
) -> None:
    for host in ("a", "b"):
        _node(tmp_path, host, [replays["clean"]] * 2)
    # The same key, device name included: only the devices being CPU runs keeps them out.
    cpu = judge_sdc(
        [SdcRun("cpu#1", H200, replays["flipped"]), SdcRun("cpu#2", H200, replays["flipped"])], KEY
    )
    (tmp_path / "c.bench.json").write_text(render_json(cpu, "c", NOW))
    assert sdc_outliers(_load(tmp_path)) == []
    _node(tmp_path, "d", [replays["flipped"]] * 2)
    assert [o.host for o in sdc_outliers(_load(tmp_path))] == ["d"]
    later = _load(tmp_path, now=datetime(2026, 12, 3, tzinfo=timezone.utc))
    assert all(n.stale for n in later) and sdc_outliers(later) == []


def test_malformed_evidence_is_not_compared(tmp_path: Path, replays: dict[str, tuple[str, ...]]) -> None:
    """A node file may hold anything: a bench.sdc without a key, with digests that are not strings,
    or without devices is left out, and the other nodes are still compared."""
    for host in ("a", "b"):
        _node(tmp_path, host, [replays["clean"]] * 2)
    _node(tmp_path, "c", [replays["flipped"]] * 2)
    bad = [
        {"key": None, "devices": {}},
        {"key": {**KEY, "gpu": H200}, "devices": {"cuda:0": {"steps": [1, 2]}}},
        {"key": {**KEY, "gpu": H200}, "devices": {"cuda:0": "x"}},
        {"key": {**KEY}, "devices": {"cuda:0": {"steps": list(replays["flipped"])}}},
    ]
    for i, evidence in enumerate(bad):
        envelope = json.loads(render_json([], f"bad{i}", NOW))
        envelope["results"] = [
            {"id": "bench.sdc", "area": "bench", "status": "pass", "summary": "?", "evidence": evidence}
        ]
        (tmp_path / f"bad{i}.bench.json").write_text(json.dumps(envelope))
    assert [o.host for o in sdc_outliers(_load(tmp_path))] == ["c"]


def test_a_node_counts_once_and_must_agree_in_every_report_of_it(
    tmp_path: Path, replays: dict[str, tuple[str, ...]]
) -> None:
    """`dltune check` (<node>.audit.json) and `dltune bench` (<node>.bench.json) both replay. Two
    reports that agree are one vote; two that differ make the node's GPUs disagree, and the fleet names
    the ones that differ from its majority."""
    for host in ("gpu01", "gpu02"):
        _node(tmp_path, host, [replays["clean"]] * 2)
    _node(tmp_path, "gpu03", [replays["flipped"]] * 2)
    (tmp_path / "gpu03.audit.json").write_text(
        render_json(judge_sdc([SdcRun("cuda:0", H200, replays["flipped"])], KEY), "gpu03", NOW)
    )
    (odd,) = sdc_outliers(_load(tmp_path))
    assert (odd.host, odd.agree, odd.agreeing, odd.nodes) == ("gpu03", True, 2, 3)
    (tmp_path / "gpu03.audit.json").write_text(
        render_json(judge_sdc([SdcRun("cuda:1", H200, replays["clean"])], KEY), "gpu03", NOW)
    )
    (odd,) = sdc_outliers(_load(tmp_path))
    assert (odd.host, odd.agree, odd.devices, odd.nodes, odd.step) == (
        "gpu03",
        False,
        ["cuda:0", "cuda:1"],
        2,
        3,
    )
