"""bench.sdc, silent data corruption by replay (issue 45): the same seeded training steps of a small MLP
on every device under test, the weights' sha256 after each step, compared bit for bit. The replay runs
with the real PyTorch on CPU (two runs stand for two devices; three where a test needs a majority, the
GPU names given as data); the seam DLTUNE_SDC_FLIP flips one bit of one device's weights after one
step, and the judgement must name that device and that step. The verdicts' boundaries are judged on
digests given as data."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from dltune.bench import judge, measure, run
from dltune.bench.judge import SdcRun, judge_sdc
from dltune.bench.measure import SDC_STEPS, BenchError
from dltune.cli import app
from dltune.model import Result, Status

torch = pytest.importorskip("torch")

H100 = "NVIDIA H100 80GB HBM3"
SMALL = measure.SdcShape(batch=16, inputs=16, hidden=32, outputs=4)  # the CPU shape's replay, smaller
K = 5  # steps where a test replays by hand


def _bench(
    devices: list[str], measured: Any = measure, flip: tuple[str, int] | None = None, **opts: Any
) -> Any:
    """The bench's own section object, with only what bench.sdc reads."""
    return run._Bench(
        run.Options(**opts), torch, measured, devices, {}, None, "", lambda _s: None, sdc_flip=flip
    )


def _as_gpus(replayed: list[str], name: str = H100) -> Any:
    """measure as bench.sdc uses it, with the GPUs' replays run on the CPU (the real PyTorch, the real
    replay) and the GPUs' name given: what a node of identical GPUs computes."""

    def replay(_torch: Any, device: str, **options: Any) -> list[str]:
        replayed.append(device)
        return measure.sdc_replay(torch, "cpu", **options)

    return SimpleNamespace(
        sdc_replay=replay,
        device_name=lambda _t, _d: name,
        sdc_key=lambda t, _devices, precision, workspace: measure.sdc_key(t, ["cpu"], precision, workspace),
    )


# --- the replay, with the real PyTorch ----------------------------------------------------------------


def test_the_replay_is_bitwise_repeatable_and_every_step_changes_the_weights() -> None:
    one = measure.sdc_replay(torch, "cpu", steps=K, shape=SMALL)
    two = measure.sdc_replay(torch, "cpu", steps=K, shape=SMALL)
    assert one == two and len(one) == K + 1  # step 0 (as copied to the device), then each step
    assert len(set(one)) == K + 1, "a step that left the weights unchanged would hide what it computed"
    assert all(len(d) == 64 and int(d, 16) >= 0 for d in one)  # sha256, hex


def test_a_flipped_bit_shows_from_its_step_on_and_not_before() -> None:
    clean = measure.sdc_replay(torch, "cpu", steps=K, shape=SMALL)
    flipped = measure.sdc_replay(torch, "cpu", steps=K, shape=SMALL, flip_after=3)
    assert flipped[:3] == clean[:3]
    assert all(a != b for a, b in zip(flipped[3:], clean[3:], strict=True))


def test_the_replay_leaves_deterministic_mode_and_tf32_as_it_found_them() -> None:
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        measure.sdc_replay(torch, "cpu", steps=1, shape=SMALL)
        assert torch.backends.cuda.matmul.allow_tf32 is True
        assert torch.are_deterministic_algorithms_enabled() is False
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_the_replay_runs_deterministic_without_tf32(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bool, bool]] = []
    digest = measure.weights_digest

    def watch(t: Any, model: Any) -> str:
        seen.append((t.are_deterministic_algorithms_enabled(), t.backends.cuda.matmul.allow_tf32))
        return digest(t, model)

    monkeypatch.setattr(measure, "weights_digest", watch)
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        measure.sdc_replay(torch, "cpu", steps=2, shape=SMALL)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    assert seen == [(True, False)] * 3


def test_bfloat16_replays_too_and_differs_from_float32() -> None:
    bf16 = measure.sdc_replay(torch, "cpu", steps=K, shape=SMALL, precision="bfloat16")
    assert bf16 == measure.sdc_replay(torch, "cpu", steps=K, shape=SMALL, precision="bfloat16")
    assert len(set(bf16)) == K + 1
    assert bf16[0] != measure.sdc_replay(torch, "cpu", steps=K, shape=SMALL)[0]


def test_the_digest_is_the_sha256_of_the_weights_bytes() -> None:
    import hashlib

    model = torch.nn.Linear(3, 2)
    expected = hashlib.sha256(
        b"".join(t.detach().numpy().tobytes() for t in model.state_dict().values())
    ).hexdigest()
    assert measure.weights_digest(torch, model) == expected


def test_the_flip_is_the_lowest_bit_of_the_first_weight() -> None:
    model = torch.nn.Linear(2, 2)
    before = model.weight.detach().clone()
    measure.flip_lowest_bit(torch, model)
    changed = (model.weight != before).flatten().tolist()
    assert changed == [True, False, False, False]
    assert (
        before.view(-1)[:1].view(torch.int32).item() ^ 1 == model.weight.view(-1)[:1].view(torch.int32).item()
    )


# --- the section: devices, the seam, the key ----------------------------------------------------------


def test_on_a_cpu_two_runs_stand_for_two_devices_and_pass() -> None:
    (result,) = _bench(["cpu"]).sdc()
    assert result.id == "bench.sdc" and result.status is Status.PASS, result.summary
    assert set(result.evidence["devices"]) == {"cpu#1", "cpu#2"}
    one, two = result.evidence["devices"].values()
    assert one == two and len(one["steps"]) == SDC_STEPS + 1 and one["digest"] == one["steps"][-1]
    assert not result.critical and "2 " in result.summary and "bit for bit alike" in result.summary


def test_the_seam_flips_on_the_cpu_and_both_runs_are_named_with_the_step() -> None:
    """Two runs that differ have no majority: the judgement names both, and the step they part at."""
    flip = run.sdc_flip({"DLTUNE_SDC_FLIP": "cpu#2:3"}, ["cpu"])
    assert flip == ("cpu#2", 3)
    (result,) = _bench(["cpu"], flip=flip).sdc()
    assert result.status is Status.FAIL and result.critical
    assert result.evidence["diverged"] == {"cpu#1": 3, "cpu#2": 3}
    assert "cpu#1, cpu#2" in result.summary and "at step 3 of 10" in result.summary
    assert result.evidence["injected"] == "DLTUNE_SDC_FLIP=cpu#2:3"
    assert "flipped on purpose: DLTUNE_SDC_FLIP=cpu#2:3" in result.summary


def test_the_seam_on_one_gpu_of_three_names_that_gpu_and_its_step() -> None:
    replayed: list[str] = []
    flip = run.sdc_flip({"DLTUNE_SDC_FLIP": "cuda:1:4"}, ["cuda:0", "cuda:1", "cuda:2"])
    (result,) = _bench(["cuda:0", "cuda:1", "cuda:2"], _as_gpus(replayed), flip=flip).sdc()
    assert replayed == ["cuda:0", "cuda:1", "cuda:2"]
    assert result.status is Status.FAIL and result.critical, result.summary
    assert result.evidence["diverged"] == {"cuda:1": 4}
    assert result.summary.startswith(
        f"cuda:1 (at step 4) computed differently from the other 2 {H100} GPU(s)"
    )
    assert result.subject == H100 and result.metrics == {"devices": 3.0, "diverged": 1.0}
    digests = {d: v["digest"] for d, v in result.evidence["devices"].items()}
    assert digests["cuda:0"] == digests["cuda:2"] != digests["cuda:1"]
    assert "replace the GPU" in (result.remedy or "")


def test_without_the_seam_identical_gpus_pass() -> None:
    (result,) = _bench(["cuda:0", "cuda:1", "cuda:2"], _as_gpus([])).sdc()
    assert result.status is Status.PASS and f"3 {H100} GPU(s) replayed 10 seeded" in result.summary
    assert "injected" not in result.evidence


@pytest.mark.parametrize(
    "value",
    ["cuda:5:2", "cuda:1:0", f"cuda:1:{SDC_STEPS + 1}", "cuda:1:x", "cuda:1", "3", "cuda:1:٣", "cpu#1:2"],
)
def test_a_seam_that_names_no_device_or_step_of_the_replay_is_refused(value: str) -> None:
    with pytest.raises(BenchError, match=r"DLTUNE_SDC_FLIP=.*give <device>:<step>.*cuda:0, cuda:1"):
        run.sdc_flip({"DLTUNE_SDC_FLIP": value}, ["cuda:0", "cuda:1"])


def test_no_seam_no_flip() -> None:
    assert run.sdc_flip({}, ["cpu"]) is None and run.sdc_flip({"DLTUNE_SDC_FLIP": " "}, ["cpu"]) is None


def test_a_bad_seam_stops_the_bench_before_anything_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLTUNE_SDC_FLIP", "cpu#3:2")
    monkeypatch.setattr(run, "_open_dataset", lambda *_a: pytest.fail("measured with a bad seam"))
    with pytest.raises(BenchError, match="cpu#1, cpu#2"):
        run.run_bench(run.Options(device="cpu"))
    monkeypatch.setenv("DLTUNE_SDC_FLIP", "")
    with pytest.raises(BenchError, match="--sdc-precision float16"):
        run.run_bench(run.Options(device="cpu", sdc_precision="float16"))


def test_no_sdc_replays_nothing() -> None:
    never = SimpleNamespace(sdc_replay=lambda *_a, **_k: pytest.fail("replayed with --no-sdc"))
    assert _bench(["cpu"], never, sdc=False).sdc() == []


def test_the_key_says_what_the_digests_depend_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    (result,) = _bench(["cpu"], sdc_precision="bfloat16").sdc()
    key = result.evidence["key"]
    assert key["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert key["precision"] == "bfloat16" and key["model"].endswith("bfloat16")
    assert key["model"].startswith(measure.SDC_METHOD) and key["steps"] == SDC_STEPS
    assert key["torch"] == torch.__version__ and key["gpu"] == measure.device_name(torch, "cpu")
    assert key["threads"] == torch.get_num_threads() and key["cpu_capability"]
    assert key["cuda"] is None and key["driver"] is None  # a CPU run depends on neither


def test_a_gpu_key_has_cuda_cublas_and_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(measure, "driver_version", lambda: "570.124.06")
    monkeypatch.setattr(measure, "cublas_version", lambda: "12.8.4.1")
    key = measure.sdc_key(torch, ["cuda:0"], "float32", None)
    assert key["driver"] == "570.124.06" and key["cublas"] == "12.8.4.1"
    assert key["cuda"] == torch.version.cuda and "threads" not in key
    assert key["model"] == measure.SDC_SHAPES["cuda"].model("float32")
    assert key["model"] != measure.sdc_key(torch, ["cpu"], "float32", None)["model"]


def test_the_driver_version_from_nvml() -> None:
    class Nvml:
        NVMLError = RuntimeError

        def __init__(self, fail: bool) -> None:
            self.fail, self.shut = fail, False

        def nvmlInit(self) -> None:
            if self.fail:
                raise RuntimeError("no driver")

        def nvmlSystemGetDriverVersion(self) -> bytes:
            return b"570.124.06"

        def nvmlShutdown(self) -> None:
            self.shut = True

    working = Nvml(False)
    assert measure.driver_version(working) == "570.124.06" and working.shut
    assert measure.driver_version(Nvml(True)) is None


def test_a_refused_replay_is_a_result_not_a_crash() -> None:
    message = (
        "Deterministic behavior was enabled with either `torch.use_deterministic_algorithms(True)` ... you "
        "must set an environment variable before running your PyTorch application: CUBLAS_WORKSPACE_CONFIG"
    )

    def refuse(*_a: Any, **_k: Any) -> list[str]:
        raise RuntimeError(message)

    gpus = SimpleNamespace(**{**vars(_as_gpus([])), "sdc_replay": refuse})
    (result,) = _bench(["cuda:0", "cuda:1"], gpus).sdc()
    assert result.status is Status.FAIL and not result.critical
    assert "role dl_env" in (result.remedy or "") and set(result.evidence["errors"]) == {"cuda:0", "cuda:1"}


# --- the judgement's boundaries, on digests given as data ----------------------------------------------

KEY = {
    "model": "m",
    "steps": 3,
    "precision": "float32",
    "torch": "2.6.0",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}
GOOD = ("s0", "s1", "s2", "s3")


def _run(device: str, trace: tuple[str, ...] = GOOD, name: str = H100, error: str | None = None) -> SdcRun:
    return SdcRun(device, name, () if error else trace, error)


def _one(runs: list[SdcRun]) -> Result:
    (result,) = judge_sdc(runs, KEY)
    return result


def test_one_gpu_of_eight_that_differs_is_named_alone_with_its_first_step() -> None:
    runs = [_run(f"cuda:{i}") for i in range(8)]
    runs[5] = _run("cuda:5", ("s0", "s1", "x2", "x3"))
    result = _one(runs)
    assert result.status is Status.FAIL and result.critical
    assert result.evidence["diverged"] == {"cuda:5": 2}
    assert result.summary.startswith(
        f"cuda:5 (at step 2) computed differently from the other 7 {H100} GPU(s)"
    )
    assert result.remedy == judge.SDC_REMEDY


def test_a_gpu_that_differs_before_training_is_said_so() -> None:
    result = _one([_run("cuda:0"), _run("cuda:1"), _run("cuda:2", ("x0", "x1", "x2", "x3"))])
    assert "cuda:2 (before training (the weights as copied to the device))" in result.summary


def test_two_of_five_that_differ_are_both_named_each_with_its_step() -> None:
    runs = [_run(f"cuda:{i}") for i in range(5)]
    runs[1] = _run("cuda:1", ("s0", "x1", "x2", "x3"))
    runs[4] = _run("cuda:4", ("s0", "s1", "s2", "x3"))
    result = _one(runs)
    assert result.evidence["diverged"] == {"cuda:1": 1, "cuda:4": 3}
    assert result.summary.startswith(
        "cuda:1 (at step 1), cuda:4 (at step 3) computed differently from the other 3"
    )


@pytest.mark.parametrize(
    "traces",
    [
        [GOOD, ("s0", "s1", "x2", "x3")],  # two GPUs that differ
        [GOOD, GOOD, ("s0", "s1", "x2", "x3"), ("s0", "s1", "x2", "x3")],  # two against two
        [GOOD, ("s0", "s1", "x2", "x3"), ("s0", "s1", "y2", "y3")],  # three answers
    ],
    ids=["two", "two_against_two", "three_answers"],
)
def test_no_majority_names_every_gpu_and_the_step_they_part(traces: list[tuple[str, ...]]) -> None:
    result = _one([_run(f"cuda:{i}", t) for i, t in enumerate(traces)])
    assert result.status is Status.FAIL and result.critical
    assert result.evidence["diverged"] == {f"cuda:{i}": 2 for i in range(len(traces))}
    assert result.summary.startswith(f"no majority among {len(traces)} {H100} GPU(s)")
    assert "parting at step 2 of 3" in result.summary and result.remedy == judge.SDC_NO_MAJORITY_REMEDY


def test_a_majority_is_more_than_half() -> None:
    """Three of five agreeing is a majority: only the other two are named."""
    traces = [GOOD, GOOD, GOOD, ("s0", "x1", "x2", "x3"), ("s0", "s1", "y2", "y3")]
    result = _one([_run(f"cuda:{i}", t) for i, t in enumerate(traces)])
    assert result.evidence["diverged"] == {"cuda:3": 1, "cuda:4": 2}


def test_gpus_of_different_models_are_compared_within_their_model() -> None:
    runs = [_run("cuda:0"), _run("cuda:1"), _run("cuda:2", ("a0", "a1", "a2", "a3"), name="NVIDIA A100")]
    results = {r.subject: r for r in judge_sdc(runs, KEY)}
    assert results[H100].status is Status.PASS and results["NVIDIA A100"].status is Status.SKIP
    assert results["NVIDIA A100"].evidence["key"]["gpu"] == "NVIDIA A100"
    assert results[H100].evidence["key"] == {**KEY, "gpu": H100}


def test_one_gpu_has_nothing_to_compare_on_the_node_and_skips_with_its_digest() -> None:
    result = _one([_run("cuda:0")])
    assert result.status is Status.SKIP and "dltune report" in result.summary
    assert result.evidence["devices"]["cuda:0"] == {"digest": "s3", "steps": list(GOOD)}


def test_a_step_that_left_the_weights_unchanged_makes_the_replay_blind() -> None:
    result = _one([_run("cuda:0", ("s0", "s1", "s1", "s3")), _run("cuda:1", ("s0", "s1", "s1", "s3"))])
    assert result.status is Status.ERROR and "blind" in result.summary


def test_a_replay_that_failed_otherwise_is_an_error_naming_the_device() -> None:
    result = _one([_run("cuda:0"), _run("cuda:1", error="CUDA error: an illegal memory access")])
    assert result.status is Status.ERROR and not result.critical
    assert result.summary == "the replay failed on cuda:1: CUDA error: an illegal memory access"
    assert result.evidence["errors"] == {"cuda:1": "CUDA error: an illegal memory access"}


def test_a_divergence_outranks_a_device_that_failed() -> None:
    runs = [
        _run("cuda:0"),
        _run("cuda:1"),
        _run("cuda:2", ("s0", "x1", "x2", "x3")),
        _run("cuda:3", error="boom"),
    ]
    result = _one(runs)
    assert result.status is Status.FAIL and result.critical
    assert result.evidence["diverged"] == {"cuda:2": 1} and result.summary.endswith(
        "; the replay failed on cuda:3"
    )


# --- the command line and `dltune check` ---------------------------------------------------------------


def _captured(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []

    def capture(options: Any, *_a: Any) -> list[Result]:
        seen.append(options)
        return [Result("bench.sdc", Status.PASS, "replayed")]

    monkeypatch.setattr("dltune.commands.bench.bench_results", capture)
    return seen


def test_the_command_line_turns_the_section_off_and_sets_its_precision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _captured(monkeypatch)
    runner = CliRunner()
    assert runner.invoke(app, ["bench", "--device", "cpu", "--format", "json"]).exit_code == 0
    outcome = runner.invoke(app, ["bench", "--no-sdc", "--sdc-precision", "bfloat16", "--format", "json"])
    assert outcome.exit_code == 0, outcome.output
    assert (seen[0].sdc, seen[0].sdc_precision) == (True, "float32")
    assert (seen[1].sdc, seen[1].sdc_precision) == (False, "bfloat16")
    refused = runner.invoke(app, ["bench", "--sdc-precision", "float16"])
    assert refused.exit_code == 2 and len(seen) == 2


def test_check_runs_the_replay_in_its_quick_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    seen = _captured(monkeypatch)
    check_module = importlib.import_module("dltune.commands.check")
    results = check_module._quick_bench("cpu")
    assert [r.id for r in results] == ["bench.sdc"] and seen[0].sdc and seen[0].quick


def test_the_section_runs_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """After every other section: it names the devices, and what it loads must not disturb the figures."""
    order: list[str] = []
    bench = _bench(["cpu"], SimpleNamespace(cpu_cores=lambda: 2), data_parallel=False)
    sections = [
        "matmul",
        "bandwidth",
        "synthetic",
        "gains",
        "compiled",
        "real_data",
        "sweep",
        "determinism",
        "sdc",
    ]

    def recorded(name: str) -> Callable[..., Any]:
        def section(*_a: Any) -> Any:
            order.append(name)
            return ([], SimpleNamespace(images_per_s=1.0)) if name == "synthetic" else []

        return section

    for name in sections:
        monkeypatch.setattr(bench, name, recorded(name))
    bench.measure_all()
    assert order[-1] == "sdc" and sorted(order) == sorted(sections)


def test_the_evidence_is_json() -> None:
    (result,) = _bench(["cpu"]).sdc()
    assert json.loads(json.dumps(result.to_dict()))["evidence"]["key"]["steps"] == SDC_STEPS
