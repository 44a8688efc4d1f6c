"""`dltune check` is never a silent pass (issue 41, item 5): where its bench should prove the node and
cannot (no PyTorch; a PyTorch that sees none of the GPUs NVML reports) it exits 3, EXIT_NOT_PROVED,
unless the audit failed (1) or erred (2); a deliberate skip (--no-bench, a critical failure, a job on
the GPUs) keeps the audit's code.

The command runs through typer's CliRunner with its probes given as data: the audit's snapshot and
results (`audit_results`), whether PyTorch is installed and what it says of CUDA (`_torch_installed`,
`_torch_cuda`: the facts PyTorch would give, never PyTorch itself), and the quick bench replaced by a
recorder of the device it was asked for (the bench itself: tests/integration/test_bench_cpu.py)."""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from typer.testing import CliRunner

from dltune.bench.judge import (
    NOT_PROVED_CAUSES,
    TorchCuda,
    bench_gate,
    check_exit_code,
    not_proved,
    torch_gpu_gate,
)
from dltune.cli import app
from dltune.model import EXIT_FAIL, EXIT_NOT_PROVED, EXIT_OK, EXIT_USAGE_OR_ERROR, Result, Status, exit_code
from dltune.snapshot import Gpu, NvmlState, Snapshot

check_module = importlib.import_module("dltune.commands.check")

ROLE_VARIABLES = ("dltune_bench_torch_packages", "dltune_bench_pip_args", "dltune_bench_python")
DRIVER = "550.54.15"
CPU_BUILD = TorchCuda(version="2.5.1+cpu", cuda=None, available=False)
CUDA_BUILD = TorchCuda(version="2.5.1+cu124", cuda="12.4", available=True)
TOO_NEW = TorchCuda(
    version="2.5.1+cu124",
    cuda="12.4",
    available=False,
    warning="CUDA initialization: The NVIDIA driver on your system is too old (found version 11040). "
    "Please update your GPU driver by downloading and installing a new version",
)
PASSING = Result("storage.tmp_tmpfs", Status.PASS, "/tmp is a tmpfs")
A_FAIL = Result("storage.noatime", Status.FAIL, "/data is mounted without noatime")
AN_ERROR = Result("nfs.responsive", Status.ERROR, "check nfs.responsive raised: boom")
CRITICAL = Result("gpu.xid", Status.FAIL, "Xid 79: GPU fell off the bus", critical=True)


def gpus(count: int, busy: dict[int, tuple[int, ...]] | None = None) -> tuple[Gpu, ...]:
    return tuple(Gpu(index=i, name="NVIDIA H200", compute_pids=(busy or {}).get(i, ())) for i in range(count))


@dataclass
class Checked:
    code: int
    results: list[dict[str, Any]]
    benched: list[str | None] = field(default_factory=list)  # the devices the quick bench was asked for
    torch_probed: int = 0

    @property
    def gate(self) -> dict[str, Any]:
        [run] = [r for r in self.results if r["id"] == "bench.run"]
        return run


def run_check(
    monkeypatch: pytest.MonkeyPatch,
    audit: Sequence[Result],
    nvml_gpus: tuple[Gpu, ...],
    torch: TorchCuda | Result | None,
    *args: str,
) -> Checked:
    """`dltune check --format json ARGS` on a node whose audit gives ``audit``, whose NVML reports
    ``nvml_gpus``, and whose PyTorch says ``torch`` (None: not installed)."""
    snapshot = Snapshot(root="/", nvml=NvmlState(available=True, driver_version=DRIVER, gpus=nvml_gpus))
    checked = Checked(0, [])

    def torch_cuda() -> TorchCuda | Result:
        assert torch is not None, "PyTorch was asked about CUDA on a node without it"
        checked.torch_probed += 1
        return torch

    def quick_bench(device: str | None) -> list[Result]:
        checked.benched.append(device)
        return [Result("bench.matmul", Status.PASS, "matmul fine", subject=device or "cuda:0")]

    monkeypatch.setattr(check_module, "audit_results", lambda *_a, **_k: (snapshot, list(audit), "node1"))
    monkeypatch.setattr(check_module, "_torch_installed", lambda: torch is not None)
    monkeypatch.setattr(check_module, "_torch_cuda", torch_cuda)
    monkeypatch.setattr(check_module, "_quick_bench", quick_bench)
    outcome = CliRunner().invoke(app, ["check", "--format", "json", *args])
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit), outcome.output
    checked.code = outcome.exit_code
    checked.results = json.loads(outcome.stdout)["results"]
    return checked


def names_the_role_variables(text: str | None) -> bool:
    return text is not None and all(v in text for v in ROLE_VARIABLES) and "dltune.cluster.dltune" in text


# ------------------------------------------------------------------------------ the command


@pytest.mark.parametrize("nvml_count", [8, 0], ids=["gpu_node", "cpu_node"])
def test_no_pytorch_is_not_proved_and_names_the_role_variables(
    monkeypatch: pytest.MonkeyPatch, nvml_count: int
) -> None:
    checked = run_check(monkeypatch, [PASSING], gpus(nvml_count), None)
    assert checked.code == EXIT_NOT_PROVED == 3
    gate = checked.gate
    assert gate["status"] == "skip" and gate["evidence"]["cause"] == "no_torch"
    assert "\n" not in gate["summary"] and "not proved" in gate["summary"]
    assert names_the_role_variables(gate["summary"]) and names_the_role_variables(gate["remedy"])
    assert checked.benched == [] and checked.torch_probed == 0


def test_a_cpu_only_pytorch_on_a_gpu_node_is_not_proved(monkeypatch: pytest.MonkeyPatch) -> None:
    """The silent pass of old: the quick bench ran on the CPU of an 8-GPU node and passed."""
    checked = run_check(monkeypatch, [PASSING], gpus(8), CPU_BUILD)
    assert checked.code == EXIT_NOT_PROVED
    gate = checked.gate
    assert gate["evidence"]["cause"] == "torch_sees_no_gpu" and checked.benched == []
    assert "torch.version.cuda: None" in gate["summary"] and "CPU-only build" in gate["summary"]
    assert "NVML reports 8 GPU(s)" in gate["summary"] and DRIVER in gate["summary"]
    assert names_the_role_variables(gate["summary"]) and names_the_role_variables(gate["remedy"])
    assert gate["evidence"]["nvml_gpus"] == 8 and gate["evidence"]["torch_cuda"] is None


def test_one_gpu_nvml_reports_is_enough_to_need_pytorch_to_see_it(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = run_check(monkeypatch, [PASSING], gpus(1), CPU_BUILD)
    assert checked.code == EXIT_NOT_PROVED and "NVML reports 1 GPU(s)" in checked.gate["summary"]


def test_a_pytorch_built_for_a_newer_cuda_than_the_driver_is_not_proved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checked = run_check(monkeypatch, [PASSING], gpus(8), TOO_NEW)
    assert checked.code == EXIT_NOT_PROVED and checked.benched == []
    gate = checked.gate
    assert gate["evidence"]["cause"] == "torch_cuda_newer_than_driver"
    assert (
        "torch.version.cuda: 12.4" in gate["summary"]
        and f"newer than driver {DRIVER} (CUDA 11.4) supports" in gate["summary"]
    )
    assert f"driver {DRIVER}" in gate["summary"] and names_the_role_variables(gate["summary"])
    assert "too old" in gate["evidence"]["torch_warning"]


def test_pytorch_without_cuda_on_a_node_without_gpus_benches_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU-only node (a lab node without the fake NVML): the quick bench runs on the CPU, as before."""
    checked = run_check(monkeypatch, [PASSING], gpus(0), CPU_BUILD)
    assert checked.code == EXIT_OK and checked.benched == [None] and checked.torch_probed == 1
    assert [r["id"] for r in checked.results] == ["storage.tmp_tmpfs", "bench.matmul"]


def test_pytorch_that_sees_the_gpus_runs_the_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = run_check(monkeypatch, [PASSING], gpus(8), CUDA_BUILD)
    assert checked.code == EXIT_OK and checked.benched == [None]
    assert not any(r["id"] == "bench.run" for r in checked.results)


def test_device_cpu_is_asked_for_and_never_asks_pytorch_about_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    checked = run_check(monkeypatch, [PASSING], gpus(8), CPU_BUILD, "--device", "cpu")
    assert checked.code == EXIT_OK and checked.benched == ["cpu"] and checked.torch_probed == 0


def test_a_pytorch_that_does_not_import_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = Result("bench.run", Status.ERROR, "bench could not run: import torch failed: libcudnn.so.9")
    checked = run_check(monkeypatch, [PASSING], gpus(8), broken)
    assert checked.code == EXIT_USAGE_OR_ERROR and checked.gate["status"] == "error" and checked.benched == []


@pytest.mark.parametrize(
    ("finding", "code"), [(A_FAIL, EXIT_FAIL), (AN_ERROR, EXIT_USAGE_OR_ERROR)], ids=["fail", "error"]
)
@pytest.mark.parametrize("torch", [None, CPU_BUILD], ids=["no_torch", "cpu_build"])
def test_a_fail_or_an_error_outranks_a_bench_that_could_not_run(
    monkeypatch: pytest.MonkeyPatch, finding: Result, code: int, torch: TorchCuda | None
) -> None:
    checked = run_check(monkeypatch, [PASSING, finding], gpus(8), torch)
    assert checked.code == code and checked.gate["evidence"]["cause"] in NOT_PROVED_CAUSES


@pytest.mark.parametrize("torch", [None, CPU_BUILD], ids=["no_torch", "cpu_build"])
def test_no_bench_is_a_deliberate_skip(monkeypatch: pytest.MonkeyPatch, torch: TorchCuda | None) -> None:
    checked = run_check(monkeypatch, [PASSING], gpus(8), torch, "--no-bench")
    assert checked.code == EXIT_OK and checked.gate["evidence"]["cause"] == "no_bench"
    assert checked.torch_probed == 0 and checked.benched == []


@pytest.mark.parametrize("torch", [None, CPU_BUILD], ids=["no_torch", "cpu_build"])
def test_a_critical_failure_keeps_its_exit_code(
    monkeypatch: pytest.MonkeyPatch, torch: TorchCuda | None
) -> None:
    checked = run_check(monkeypatch, [PASSING, CRITICAL], gpus(8), torch)
    assert checked.code == EXIT_FAIL and checked.gate["evidence"]["cause"] == "critical_failure"
    assert checked.torch_probed == 0 and checked.benched == []


@pytest.mark.parametrize("torch", [None, CPU_BUILD], ids=["no_torch", "cpu_build"])
def test_busy_gpus_are_a_deliberate_skip(monkeypatch: pytest.MonkeyPatch, torch: TorchCuda | None) -> None:
    checked = run_check(monkeypatch, [PASSING], gpus(8, busy={3: (4242,)}), torch)
    assert checked.code == EXIT_OK and checked.gate["evidence"]["cause"] == "busy_gpus"
    assert "GPU 3: pid 4242" in checked.gate["summary"]
    assert checked.torch_probed == 0 and checked.benched == []


def test_the_help_states_the_exit_codes() -> None:
    text = " ".join(CliRunner().invoke(app, ["check", "--help"], terminal_width=200).stdout.split())
    assert "Exit 0 ok; 1 a fail; 2 usage or an error, no fail; 3 no fail and no error" in text


# ------------------------------------------------------------------------------ the decisions


def gate_result(cause: str) -> Result:
    return Result("bench.run", Status.SKIP, "bench not run", evidence={"cause": cause})


@pytest.mark.parametrize(
    ("results", "code"),
    [
        ([PASSING], EXIT_OK),
        ([PASSING, gate_result("no_torch")], EXIT_NOT_PROVED),
        ([gate_result("torch_sees_no_gpu")], EXIT_NOT_PROVED),
        ([gate_result("torch_cuda_newer_than_driver")], EXIT_NOT_PROVED),
        ([Result("gpu.ecc", Status.WARN, "corrected"), gate_result("no_torch")], EXIT_NOT_PROVED),
        ([A_FAIL, gate_result("no_torch")], EXIT_FAIL),
        ([AN_ERROR, gate_result("no_torch")], EXIT_USAGE_OR_ERROR),
        ([A_FAIL, AN_ERROR, gate_result("no_torch")], EXIT_FAIL),
        ([gate_result("no_bench")], EXIT_OK),
        ([gate_result("busy_gpus")], EXIT_OK),
        ([CRITICAL, gate_result("critical_failure")], EXIT_FAIL),
        # Only bench.run's own cause counts: DCGM's skip copies the gate's evidence.
        ([Result("gpu.dcgm", Status.SKIP, "not run", evidence={"cause": "no_torch"})], EXIT_OK),
        ([Result("bench.run", Status.SKIP, "bench not run")], EXIT_OK),
    ],
)
def test_check_exit_code_precedence(results: list[Result], code: int) -> None:
    assert check_exit_code(results) == code
    assert check_exit_code(iter(results)) == code  # any iterable, read once


def test_audit_and_bench_keep_their_exit_codes() -> None:
    """Code 3 is `dltune check`'s alone: model.exit_code (audit, bench) reads a not-proved skip as 0."""
    assert exit_code([PASSING, gate_result("no_torch")]) == EXIT_OK


def test_every_gate_names_its_cause_and_only_unrunnable_ones_are_not_proved() -> None:
    causes = {
        "no_bench": bench_gate([], {}, True, True),
        "critical_failure": bench_gate([CRITICAL], {}, False, False),
        "busy_gpus": bench_gate([], {0: [1]}, False, False),
        "no_torch": bench_gate([], {}, False, False),
        "torch_sees_no_gpu": torch_gpu_gate(CPU_BUILD, 2, DRIVER),
        "torch_cuda_newer_than_driver": torch_gpu_gate(TOO_NEW, 2, DRIVER),
    }
    for cause, result in causes.items():
        assert result is not None and result.id == "bench.run" and result.status is Status.SKIP, cause
        assert result.evidence["cause"] == cause
        assert not_proved(result) is (cause in NOT_PROVED_CAUSES), cause
    assert {"no_torch", "torch_sees_no_gpu", "torch_cuda_newer_than_driver"} == NOT_PROVED_CAUSES
    assert bench_gate([], {}, True, False) is None


def test_the_torch_gate_opens_at_its_boundaries() -> None:
    assert torch_gpu_gate(CPU_BUILD, 0, None) is None  # no GPU: the CPU bench is the bench
    assert torch_gpu_gate(CPU_BUILD, 1, None) is not None
    assert torch_gpu_gate(CUDA_BUILD, 8, DRIVER) is None
    assert torch_gpu_gate(TorchCuda("2.5.1+cpu", None, True), 8, DRIVER) is None  # it sees them


def test_a_cuda_build_that_sees_no_gpu_says_what_torch_reports() -> None:
    hidden = TorchCuda("2.5.1+cu124", "12.4", False, visible_devices="")
    gate = torch_gpu_gate(hidden, 4, None)
    assert gate is not None and gate.evidence["cause"] == "torch_sees_no_gpu"
    assert "torch.version.cuda: 12.4, CUDA_VISIBLE_DEVICES=''" in gate.summary
    assert "sees no GPU, NVML reports 4 GPU(s); install" in gate.summary
    assert names_the_role_variables(gate.summary)
    assert gate.evidence["CUDA_VISIBLE_DEVICES"] == "" and "torch_warning" not in gate.evidence
    # Error 35 names no driver version: the cause is still the driver's CUDA, without a figure.
    insufficient = TorchCuda(
        "2.5.1", "12.4", False, warning="CUDA driver version is insufficient for CUDA runtime version"
    )
    older = torch_gpu_gate(insufficient, 4, DRIVER)
    assert older is not None and older.evidence["cause"] == "torch_cuda_newer_than_driver"
    assert "(CUDA" not in older.summary and "newer than driver" in older.summary
