"""dltune.costs.impact: each finding's price from the figures of the same run, at each method's boundary."""

from __future__ import annotations

import io
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from dltune.bench import io_cost
from dltune.costs.impact import (
    ONE_CONNECTION_SHARE,
    IoCost,
    Node,
    bench_gpus,
    node_loss,
    price,
)
from dltune.fleet.cluster import NodeReport, check_costs, fleet_priced, render_html, render_summary
from dltune.model import Result, Status
from dltune.outputs.prometheus import render_prometheus

UUID = "GPU-3b0c6a1e-0000-0000-0000-000000000001"


def matmul(achievable: float | None, best: float, uuid: str = UUID, dtype: str = "bf16") -> Result:
    metrics = {"tflops": 600.0, "fraction_of_best": best}
    if achievable is not None:
        metrics["fraction_of_achievable"] = achievable
    status = Status.WARN if min(best, achievable or 1.0) < 0.9 else Status.PASS
    return Result(
        "bench.matmul",
        status,
        "matmul",
        subject=f"cuda:0:{dtype}",
        evidence={"dtype": dtype, "uuid": uuid},
        metrics=metrics,
    )


def clocks(uuid: str = UUID) -> Result:
    return Result("gpu.clocks", Status.WARN, "clocks held down: SW power cap", subject=f"0:{uuid}")


EIGHT_GPUS = Node(gpus=8)


def impact_of(results: list[Result], check_id: str, node: Node = EIGHT_GPUS) -> dict:
    return next(r for r in price(results, node) if r.id == check_id).impact  # type: ignore[return-value]


def test_a_clock_finding_is_priced_by_its_gpus_matmul_against_the_larger_reference() -> None:
    """The loss is against the more demanding of the card's healthy figure and the node's best GPU."""
    impact = impact_of([clocks(), matmul(achievable=0.8, best=0.9)], "gpu.clocks")
    assert impact["basis"] == "measured" and impact["of"] == "matmul"
    assert impact["fraction"] == pytest.approx(0.2) and impact["gpus"] == 1
    assert impact["gpu_hours_per_day"] == pytest.approx(4.8)
    assert impact["scope"] == f"matmul:{UUID}" and "80.0% of what a healthy card" in impact["method"]


def test_the_node_use_scales_the_hours_and_a_gpu_at_its_figure_costs_a_measured_zero() -> None:
    half = impact_of([clocks(), matmul(0.8, 0.9)], "gpu.clocks", Node(gpus=8, use=0.5))
    assert half["gpu_hours_per_day"] == pytest.approx(2.4)
    healthy = impact_of([clocks(), matmul(1.02, 1.0)], "gpu.clocks")
    assert healthy["basis"] == "measured" and healthy["fraction"] == 0.0


def test_the_dtype_training_runs_in_prices_a_gpu_measured_in_several() -> None:
    results = [clocks(), matmul(0.5, 0.5, dtype="fp32"), matmul(0.8, 0.8, dtype="bf16")]
    assert impact_of(results, "gpu.clocks")["fraction"] == pytest.approx(0.2)


def test_a_clock_finding_without_its_gpus_matmul_says_why_and_points_to_the_fleet() -> None:
    impact = impact_of([clocks(), matmul(0.8, 0.9, uuid="GPU-other")], "gpu.clocks")
    assert impact["basis"] == "unpriced" and "fleet" in impact["why"] and "gpu_hours_per_day" not in impact


def test_one_loss_priced_by_two_findings_counts_once_and_a_node_out_counts_all() -> None:
    results = [r.to_dict() for r in price([clocks(), matmul(0.8, 0.9)], Node(gpus=8))]
    assert node_loss(results) == pytest.approx(4.8)
    ecc = Result("gpu.ecc", Status.FAIL, "uncorrected ECC", subject=f"1:{UUID}", critical=True)
    out = [r.to_dict() for r in price([clocks(), matmul(0.8, 0.9), ecc], Node(gpus=8))]
    priced_ecc = next(r for r in out if r["id"] == "gpu.ecc")["impact"]
    assert priced_ecc["of"] == "node" and priced_ecc["gpu_hours_per_day"] == pytest.approx(192)
    assert node_loss(out) == pytest.approx(192)


def test_an_acknowledged_critical_failure_still_takes_the_node_out() -> None:
    acked = Result(
        "gpu.present",
        Status.WARN,
        "acknowledged: GPU lost",
        acknowledged={"was": "fail", "was_critical": True},
    )
    assert impact_of([acked], "gpu.present", Node(gpus=4))["gpu_hours_per_day"] == pytest.approx(96)


def host_link(rate: float) -> Result:
    return Result(
        "bench.host_link",
        Status.WARN,
        "h2d pinned",
        subject="cuda:0:h2d pinned",
        evidence={"uuid": UUID, "healthy_share": 0.68},
        metrics={"gb_s": rate, "link_gb_s": 31.5, "fraction_of_link": rate / 31.5},
    )


TRAIN = Result(
    "bench.train_real",
    Status.PASS,
    "train",
    subject="cuda:0",
    evidence={"batch": 64, "image_size": 224},
    metrics={"images_per_s": 640.0},
)


def test_a_slow_link_costs_the_copys_extra_time_within_the_measured_step() -> None:
    pcie = Result("gpu.pcie", Status.WARN, "link Gen3 x8", subject=f"0:{UUID}")
    impact = impact_of([pcie, host_link(12.0), TRAIN], "gpu.pcie")
    size = 64 * 224 * 224 * 12
    extra = size / 12e9 - size / (31.5 * 0.68 * 1e9)
    assert impact["basis"] == "measured" and impact["of"] == "training step"
    assert impact["fraction"] == pytest.approx(extra / 0.1, abs=1e-4)
    assert impact_of([pcie, host_link(22.0), TRAIN], "gpu.pcie")["fraction"] == 0.0
    assert impact_of([pcie, host_link(12.0)], "gpu.pcie")["basis"] == "unpriced"


def test_the_input_gap_and_the_dataloader_are_priced_by_their_own_figures() -> None:
    gap = Result("bench.input_gap", Status.WARN, "gap", metrics={"gap_percent": 30.0})
    assert impact_of([gap], "bench.input_gap")["fraction"] == pytest.approx(0.3)
    assert impact_of([gap], "bench.input_gap")["gpu_hours_per_day"] == pytest.approx(8 * 24 * 0.3)
    loader = Result(
        "bench.dataloader",
        Status.PASS,
        "best",
        evidence={"best": "num_workers=8", "default": "num_workers=0"},
        remedy="use num_workers=8",
        metrics={"gain_percent": 25.0},
    )
    assert impact_of([loader], "bench.dataloader")["fraction"] == pytest.approx(0.2)
    assert (
        price([Result("bench.dataloader", Status.PASS, "best", metrics={"gain_percent": 5.0})], Node(8))[
            0
        ].impact
        is None
    )


def test_file_system_findings_take_the_measured_cost_or_say_what_measures_it() -> None:
    atime = Result("storage.data_noatime", Status.WARN, "strictatime", subject="/data")
    measured = Node(8, io_costs={"/data": IoCost(0.25, io_cost.SMALL_FILE_READS, "measured: 40 vs 30 ms")})
    impact = impact_of([atime], "storage.data_noatime", measured)
    assert impact["basis"] == "measured" and impact["fraction"] == 0.25 and impact["of"] == "small-file reads"
    assert "dltune check" in impact_of([atime], "storage.data_noatime")["why"]
    refused = Node(8, io_costs={"/data": IoCost(None, io_cost.SMALL_FILE_READS, why="not writable")})
    assert impact_of([atime], "storage.data_noatime", refused) == {"basis": "unpriced", "why": "not writable"}


def test_nfs_over_one_connection_is_estimated_with_its_source() -> None:
    shared = Result(
        "nfs.vip_mounts",
        Status.FAIL,
        "shares",
        subject="/mnt/vip1",
        evidence={"shares_connection_with": ["/mnt/vip0"]},
    )
    impact = impact_of([shared], "nfs.vip_mounts")
    assert impact["basis"] == "estimated" and "iotrap" in impact["source"]
    assert impact["fraction"] == pytest.approx(1 - ONE_CONNECTION_SHARE, abs=1e-4)
    spread = Result(
        "network.vip_spread",
        Status.FAIL,
        "one NIC",
        evidence={"expected_vips_per_nic": {"eth1": 1, "eth2": 1}, "actual_vips_per_nic": {"eth1": 2}},
    )
    assert impact_of([spread], "network.vip_spread")["fraction"] == pytest.approx(0.5)


def test_no_price_is_never_a_zero_and_passing_results_carry_none() -> None:
    odd = Result("system.time_sync", Status.WARN, "clock off")
    assert impact_of([odd], "system.time_sync") == {
        "basis": "unpriced",
        "why": "no method prices system.time_sync (docs/commands.md, What a finding costs)",
    }
    assert price([Result("system.time_sync", Status.PASS, "ok")], Node(8))[0].impact is None


def test_the_bench_counts_the_gpus_it_measured() -> None:
    results = [matmul(1, 1), Result("bench.matmul", Status.PASS, "x", subject="cuda:1:fp32"),
               Result("bench.gpu_pairs", Status.PASS, "x", subject="cuda:0->cuda:1")]  # fmt: skip
    assert bench_gpus(results) == 2
    assert bench_gpus([Result("bench.matmul", Status.PASS, "x", subject="cpu:fp32")]) == 0


def test_a_cost_within_the_noise_is_a_measured_zero_said_so() -> None:
    assert io_cost._cost(0.0105, 0.0100, 0.001, "x", "m").fraction == 0.0
    assert "within the measurement's noise" in io_cost._cost(0.0105, 0.0100, 0.001, "x", "m").method
    assert io_cost._cost(0.020, 0.010, 0.001, "x", "m").fraction == pytest.approx(0.5)
    assert io_cost._cost(0.0103, 0.0100, 0.0, "x", "m").fraction == 0.0  # under the 3% floor
    assert io_cost._cost(0.0104, 0.0100, 0.0, "x", "m").fraction == pytest.approx(0.0385, abs=1e-3)


def test_the_measurements_clean_up_after_themselves_and_say_why_they_cannot_run(tmp_path: Path) -> None:
    cost = io_cost.atime_cost(tmp_path, "relatime", files=50, epochs=1, rounds=3)
    assert cost.fraction is not None and 0.0 <= cost.fraction < 1.0 and "O_NOATIME" in cost.method
    scratch = io_cost.tmp_cost(tmp_path, tmp_path, files=20, rounds=3)
    assert scratch.fraction is not None
    assert list(tmp_path.iterdir()) == []
    missing = io_cost.atime_cost(tmp_path / "absent", "relatime")
    assert missing.fraction is None and str(tmp_path / "absent") in missing.why


def node_file(host: str, results: list[Result]) -> NodeReport:
    return NodeReport(host, [r.to_dict() for r in results])


def test_the_report_opens_with_what_costs_the_fleet_most_at_200_nodes() -> None:
    """A generated fleet of 200 nodes: 150 with a GPU held down (4.8 GPU-hours a day each, gpu.clocks
    and bench.matmul pricing the same loss), 20 input-bound (30% of 8 GPUs), 3 out of scheduling
    (uncorrected ECC: all 8 GPUs), 40 with an unpriced time warning. The summary's first lines rank by
    GPU-hours a day, each node's one loss counted once; the unpriced come after, by severity."""
    nodes = []
    for index in range(200):
        results = [Result("system.cpu_governor", Status.PASS, "performance")]
        if index < 150:
            results += [clocks(), matmul(0.8, 0.9)]
        elif index < 170:
            results.append(Result("bench.input_gap", Status.WARN, "gap", metrics={"gap_percent": 30.0}))
        elif index < 173:
            results.append(Result("gpu.ecc", Status.FAIL, "uncorrected", subject=f"0:{UUID}", critical=True))
            results += [clocks(), matmul(0.8, 0.9)]
        if index >= 160:
            results.append(Result("system.time_sync", Status.WARN, "not synchronised"))
        nodes.append(node_file(f"gpu{index:03d}", price(results, Node(gpus=8))))
    costs, unpriced = check_costs(nodes)
    assert costs[0].check == "bench.input_gap" and costs[0].gpu_hours_per_day == pytest.approx(
        20 * 8 * 24 * 0.3
    )
    assert costs[1].check == "gpu.clocks" and costs[1].gpu_hours_per_day == pytest.approx(150 * 4.8)
    assert costs[2].check == "gpu.ecc" and costs[2].gpu_hours_per_day == pytest.approx(3 * 192)
    assert "bench.matmul" not in {c.check for c in costs}  # its loss is gpu.clocks', counted once
    assert unpriced == [("system.time_sync", "warn", [f"gpu{i:03d}" for i in range(160, 200)])]
    out = io.StringIO()
    render_summary(nodes, Console(file=out, width=400))
    # The title line first (and what the nodes not healthy are), then what to fix first.
    title, others, *lines = out.getvalue().splitlines()
    assert title.startswith("dltune report: 200 node(s), 197 healthy") and others == "not healthy: 3 failing"
    assert (
        lines[0]
        == f"what to fix first: {20 * 8 * 24 * 0.3 + 720 + 576:.1f} GPU-hours a day lost across the fleet"
    )
    assert lines[1].startswith("  bench.input_gap: 1152.0 GPU-hours a day on 20 node(s) (measured)")
    assert lines[3].startswith("  gpu.ecc: 576.0 GPU-hours a day on 3 node(s) (estimated)")
    assert lines[4] == "  not priced (by severity, nodes): system.time_sync warn on 40"
    page = render_html(nodes, "now")
    assert page.index("<h2>What to fix first</h2>") < page.index('<table class="matrix">')
    assert page.index("bench.input_gap") < page.index("<td>gpu.clocks</td>") < page.index("<td>gpu.ecc</td>")


def test_the_fleet_prices_a_clock_finding_its_node_could_not() -> None:
    """Nodes benched on the CPU (the lab): the throttled node's gpu.clocks is priced against the
    median of the same CPU's matmul over the fleet; with fewer than 3 nodes nothing is priced."""

    def cpu_node(host: str, tflops: float, throttled: bool) -> NodeReport:
        bench = Result(
            "bench.matmul",
            Status.PASS,
            "cpu",
            subject="cpu:fp32",
            evidence={"name": "x86_64", "dtype": "fp32"},
            metrics={"tflops": tflops, "fraction_of_best": 1.0},
        )
        finding = [clocks()] if throttled else []
        return node_file(host, price([*finding, bench], Node(gpus=2)))

    fleet = [cpu_node("node1", 0.10, False), cpu_node("node2", 0.11, False), cpu_node("node3", 0.025, True)]
    assert fleet[2].results[0]["impact"]["basis"] == "unpriced"
    priced_fleet = fleet_priced(fleet)
    impact = priced_fleet[2].results[0]["impact"]
    assert impact["basis"] == "measured" and impact["fraction"] == pytest.approx(0.75)
    assert "the median 0.10 of x86_64 on 3 nodes" in impact["method"] and "CPU" in impact["method"]
    assert impact["gpu_hours_per_day"] == pytest.approx(0.75 * 24)
    assert fleet_priced(fleet[1:])[1].results[0]["impact"]["basis"] == "unpriced"


def test_the_textfile_carries_each_price_and_the_nodes_loss_counted_once() -> None:
    text = render_prometheus(price([clocks(), matmul(0.8, 0.9)], Node(gpus=8)), datetime.now(timezone.utc))
    found = {
        (family.name, sample.labels.get("check")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if "lost_gpu_seconds" in family.name
    }
    assert found[("dltune_finding_lost_gpu_seconds_per_day", "gpu.clocks")] == pytest.approx(4.8 * 3600)
    assert found[("dltune_finding_lost_gpu_seconds_per_day", "bench.matmul")] == pytest.approx(4.8 * 3600)
    assert found[("dltune_node_lost_gpu_seconds_per_day", None)] == pytest.approx(4.8 * 3600)
    promtool = shutil.which("promtool")
    if promtool:
        linted = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        assert linted.returncode == 0, linted.stderr


def test_a_scratch_directory_swapped_during_the_measurement_is_never_written_through_or_removed(
    tmp_path: Path,
) -> None:
    """The hostile user's view: on a disk others may write to, the measurement's directory is renamed
    away and a directory (or a link) of theirs put in its place. Files are made relative to the open
    directory, so none lands in theirs, and theirs is not removed at the end."""
    with io_cost._private_directory(tmp_path) as fd:
        assert isinstance(fd, int)
        (made,) = list(tmp_path.iterdir())
        assert made.stat().st_mode & 0o777 == 0o700
        made.rename(tmp_path / "moved")
        decoy = tmp_path / made.name
        decoy.mkdir()
        (decoy / "theirs").write_text("keep")
        io_cost._files(fd, 3, 16)
        assert sorted(p.name for p in (tmp_path / "moved").iterdir()) == ["f00000", "f00001", "f00002"]
        assert [p.name for p in decoy.iterdir()] == ["theirs"]
    assert (decoy / "theirs").read_text() == "keep"
    assert list((tmp_path / "moved").iterdir()) == []  # ours emptied through its descriptor
    link_target = tmp_path / "target"
    link_target.mkdir()
    before = set(tmp_path.iterdir())
    with io_cost._private_directory(tmp_path) as fd:
        assert isinstance(fd, int)
        (ours,) = set(tmp_path.iterdir()) - before
        ours.rename(tmp_path / "moved-again")
        ours.symlink_to(link_target)
        io_cost._files(fd, 1, 16)
    assert list(link_target.iterdir()) == [] and ours.is_symlink()


def test_the_first_section_stays_short_above_the_grid() -> None:
    """Thirty unpriced checks: ten rows and "+20 more", the findings right after (their table lists
    every one)."""
    results = [Result(f"system.odd_{i:02d}", Status.WARN, "odd") for i in range(30)]
    page = render_html([node_file("n1", price(results, Node(gpus=8)))], "now")
    first = page[page.index("<h2>What to fix first</h2>") : page.index("<h2>Findings</h2>")]
    assert first.count("<td>system.odd_") == 10 and "+20 more (the findings below)" in first
    assert page.count('<td><span class="tok">system.odd_') == 30  # all of them in the findings table


@pytest.mark.parametrize(
    ("losses", "priced"),
    [
        ([0.20, 0.21, 0.19, 0.20, 0.22], 0.20),  # steady: the median loss
        ([0.20, 0.02, 0.40, 0.10, 0.30], 0.0),  # each round's loss deviates by 0.1: 0.2 is within 2 x that
        ([0.20, 0.12, 0.28, 0.20, 0.12], 0.20),  # deviating by 0.08: 0.2 is beyond 2 x that (not 3 x)
        ([0.02, 0.02, 0.02], 0.0),  # under the 3% floor
    ],
)
def test_the_atime_cost_is_the_median_loss_of_each_round_beyond_twice_its_deviation(
    monkeypatch: pytest.MonkeyPatch, losses: list[float], priced: float
) -> None:
    """Each round's reads as mounted against the same round's O_NOATIME reads (faked at read_rounds:
    the measure itself is tested in test_ledger), so a round the whole machine slowed moves both."""
    speeds = [1.0, 0.5, 2.0, 1.0, 0.7][: len(losses)]  # the machine's own speed, round by round
    rounds = io_cost.Rounds(
        [100 * s * (1 - loss) for s, loss in zip(speeds, losses, strict=True)], [100 * s for s in speeds], "r"
    )
    monkeypatch.setattr(io_cost, "read_rounds", lambda *args, **kwargs: rounds)
    cost = io_cost.atime_cost(Path("/data"), "strictatime", rounds=len(losses))
    assert cost.fraction == pytest.approx(priced)
    assert ("within the measurement's noise" in cost.method) == (priced == 0.0)
