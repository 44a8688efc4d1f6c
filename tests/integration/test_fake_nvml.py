"""The driver and gpu areas through the real pynvml code path, against a fake libnvidia-ml.so.1.

No GPU exists here, so NVML is faked at its lowest boundary: tests/fakenvml/fake_nvml.c is built
with gcc and loaded by pynvml through LD_LIBRARY_PATH; its answers come from the scenario files in
tests/fixtures/nvml/. Each scenario asserts the audit's statuses and exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dltune.probes.watchdog import CHILD_MARKER
from tests.conftest import FIXTURES, REPO_ROOT

SCENARIOS = FIXTURES / "nvml"


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which("gcc"):
        pytest.fail("gcc is needed to build the fake NVML library")
    out = tmp_path_factory.mktemp("fakenvml")
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-Wall",
            "-Werror",
            "-O2",
            "-o",
            str(out / "libnvidia-ml.so.1"),
            str(REPO_ROOT / "tests/fakenvml/fake_nvml.c"),
        ],
        check=True,
    )
    return out


def scenario_env(library_dir: Path, scenario: str | None) -> dict[str, str]:
    env = {**os.environ, "LD_LIBRARY_PATH": str(library_dir)}
    env.pop("DLTUNE_FAKE_NVML_SCENARIO", None)
    if scenario:
        env["DLTUNE_FAKE_NVML_SCENARIO"] = str(SCENARIOS / f"{scenario}.conf")
    return env


def audit(
    library_dir: Path, scenario: str | None, only: str = "gpu,driver"
) -> tuple[int, dict[tuple[str, str | None], dict[str, Any]]]:
    env = scenario_env(library_dir, scenario)
    done = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "audit", "--only", only, "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert done.returncode in (0, 1), done.stderr
    results = json.loads(done.stdout)["results"]
    # Subjects are "<index>:<uuid>"; key by index so tests read naturally.
    return done.returncode, {(r["id"], (r["subject"] or "").split(":")[0] or None): r for r in results}


def statuses(results: dict[tuple[str, str | None], dict[str, Any]], check_id: str) -> dict[str | None, str]:
    return {subject: r["status"] for (cid, subject), r in results.items() if cid == check_id}


def test_no_library_is_not_a_gpu_node(tmp_path: Path) -> None:
    rc, results = audit(tmp_path, None)
    assert rc == 0
    assert results[("driver.loaded", None)]["status"] == "skip"
    assert all(r["status"] == "skip" for r in results.values())


def test_no_driver_fails_and_may_drain(fake_nvml_dir: Path) -> None:
    rc, results = audit(fake_nvml_dir, "no_driver")
    loaded = results[("driver.loaded", None)]
    assert rc == 1 and loaded["status"] == "fail" and loaded["critical"] is True
    assert "nvidia_driver" in loaded["remedy"]


def test_version_mismatch_says_reboot(fake_nvml_dir: Path) -> None:
    rc, results = audit(fake_nvml_dir, "version_mismatch")
    loaded = results[("driver.loaded", None)]
    assert rc == 1 and loaded["status"] == "fail" and "mismatch" in loaded["summary"]
    assert loaded["remedy"].startswith("reboot")


def test_healthy_eight_gpu_node_passes(fake_nvml_dir: Path) -> None:
    rc, results = audit(fake_nvml_dir, "healthy_8gpu")
    assert rc == 0
    assert results[("driver.loaded", None)]["evidence"]["driver_version"] == "580.95.05"
    assert results[("gpu.present", None)]["metrics"]["gpus"] == 8
    for check_id in ("gpu.ecc", "gpu.pcie", "gpu.clocks", "gpu.thermal_power", "gpu.persistence"):
        assert statuses(results, check_id) == {str(i): "pass" for i in range(8)}, check_id


def test_one_lost_gpu_fails_and_the_others_still_report(fake_nvml_dir: Path) -> None:
    rc, results = audit(fake_nvml_dir, "one_gpu_lost")
    assert rc == 1
    assert statuses(results, "gpu.present") == {"3": "fail"}
    assert results[("gpu.present", "3")]["critical"] is True
    ecc = statuses(results, "gpu.ecc")
    assert ecc.pop("3") == "skip" and set(ecc.values()) == {"pass"} and len(ecc) == 7


def test_nvml_errors_are_data_and_a_gpu_answering_nothing_is_lost(fake_nvml_dir: Path) -> None:
    """NVML's "Unknown Error" on every query of a GPU: lost (critical), as gpustat counts it, not a
    healthy GPU with no figures. On its ECC queries only: gpu.ecc warns naming the error (not "not
    supported") and records the failed queries."""
    rc, results = audit(fake_nvml_dir, "unknown_error")
    assert rc == 1
    lost = results[("gpu.present", "1")]
    assert lost["status"] == "fail" and lost["critical"] and "every NVML query failed" in lost["summary"]
    ecc = statuses(results, "gpu.ecc")
    assert ecc["2"] == "warn" and ecc["0"] == "pass" and ecc["1"] == "skip"
    assert "Unknown Error" in results[("gpu.ecc", "2")]["summary"]
    assert set(results[("gpu.ecc", "2")]["evidence"]["nvml_errors"]) == {
        "GetTotalEccErrors",
        "GetRemappedRows",
    }


def test_not_supported_fields_skip_without_failing(fake_nvml_dir: Path) -> None:
    rc, results = audit(fake_nvml_dir, "not_supported")
    assert rc == 0
    for check_id in ("gpu.ecc", "gpu.clocks", "gpu.persistence"):
        assert set(statuses(results, check_id).values()) == {"skip"}, check_id
    assert set(statuses(results, "gpu.pcie").values()) == {"pass"}


def test_ecc_and_row_remap_failures(fake_nvml_dir: Path) -> None:
    rc, results = audit(fake_nvml_dir, "ecc_remap")
    assert rc == 1
    assert statuses(results, "gpu.ecc") == {"0": "pass", "1": "fail", "2": "fail", "3": "warn"}
    assert results[("gpu.ecc", "1")]["evidence"]["uncorrected_volatile"] == 3


def test_degraded_pcie_link(fake_nvml_dir: Path) -> None:
    rc, results = audit(fake_nvml_dir, "degraded_pcie")
    assert rc == 1
    assert statuses(results, "gpu.pcie") == {"0": "warn", "1": "fail", "2": "pass", "3": "pass"}
    assert "x8" in results[("gpu.pcie", "1")]["summary"]
    # Idle or busy unknown: the lowered generation is not called "under load".
    assert "whether the GPU is busy is not reported" in results[("gpu.pcie", "2")]["summary"]
    assert (
        "idle by utilization 0 % and no compute process: idle GPUs lower"
        in results[("gpu.pcie", "3")]["summary"]
    )
    assert results[("gpu.pcie", "0")]["evidence"]["idle_by"] == "utilization 85 % and 1 compute process(es)"


def test_thermal_throttling(fake_nvml_dir: Path) -> None:
    rc, results = audit(fake_nvml_dir, "thermal_throttle")
    assert rc == 1
    assert statuses(results, "gpu.clocks") == {"0": "fail", "1": "warn"}
    assert "hw thermal slowdown" in results[("gpu.clocks", "0")]["evidence"]["reasons"]
    assert statuses(results, "gpu.thermal_power") == {"0": "warn", "1": "pass"}
    assert statuses(results, "gpu.persistence") == {"0": "pass", "1": "warn"}


@pytest.mark.gpu
@pytest.mark.skipif(not Path("/dev/nvidiactl").exists(), reason="no NVIDIA GPU on this machine")
def test_real_gpu_node_reports_every_gpu() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "audit", "--only", "gpu,driver", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    results = json.loads(done.stdout)["results"]
    assert {r["status"] for r in results if r["id"] == "driver.loaded"} == {"pass"}
    assert not [r for r in results if r["status"] == "error"]


def _probe_children(kind: str = "nvml") -> list[int]:
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and b"--dltune-probe-child" in _cmdline(p) and kind.encode() in _cmdline(p)
    ]


def _cmdline(proc_dir: Path) -> bytes:
    try:
        return (proc_dir / "cmdline").read_bytes()
    except OSError:
        return b""


@pytest.fixture
def no_stuck_children() -> Iterator[None]:
    yield
    for pid in _probe_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _fake_env(library_dir: Path, scenario: str) -> dict[str, str]:
    return {
        **os.environ,
        "LD_LIBRARY_PATH": str(library_dir),
        "DLTUNE_FAKE_NVML_SCENARIO": str(SCENARIOS / f"{scenario}.conf"),
    }


def _timed_audit(library_dir: Path, scenario: str, *args: str) -> tuple[float, int, dict[str, Any]]:
    env = _fake_env(library_dir, scenario)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "audit", "--format", "json", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    elapsed = time.monotonic() - start
    assert done.returncode in (0, 1), done.stderr
    return elapsed, done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("scenario", ["hung_init", "hung_gpu"])
def test_a_hung_nvml_is_a_critical_fail_not_a_hung_audit(
    fake_nvml_dir: Path, scenario: str, no_stuck_children: None
) -> None:
    """The fake library blocks in nvmlInit, or in every call on one GPU, and ignores SIGTERM: the audit
    still returns (NVML ran in a child that is killed and abandoned at the deadline), driver.loaded
    fails critically naming the wait, and the gpu checks skip pointing to it. Timing limits here are
    generous bounds for a loaded CI machine; the deadline itself is 2 s."""
    elapsed, rc, doc = _timed_audit(fake_nvml_dir, scenario, "--only", "gpu,driver", "--nvml-timeout", "2")
    assert elapsed < 20, elapsed
    results = {(r["id"], r["subject"]): r for r in doc["results"]}
    loaded = results[("driver.loaded", None)]
    assert rc == 1 and loaded["status"] == "fail" and loaded["critical"], loaded
    assert "NVML did not answer in 2 s" in loaded["summary"]
    gpu = [r for r in doc["results"] if r["area"] == "gpu" and r["id"] not in ("gpu.xid", "gpu.sxid")]
    assert gpu and all(r["status"] == "skip" and "see driver.loaded" in r["summary"] for r in gpu), gpu


def test_no_second_nvml_child_while_a_stuck_one_lives(fake_nvml_dir: Path, no_stuck_children: None) -> None:
    """The stuck child of the first audit is still alive (SIGKILL is pending on a real stuck task; here
    the fake one ignores SIGTERM and we keep it): the next audit does not start another one."""
    _timed_audit(fake_nvml_dir, "hung_init", "--only", "driver", "--nvml-timeout", "1")
    # The first audit killed its child; on a real node a task in the kernel survives SIGKILL. Stand in
    # for that with a live process carrying the same marker, older than the timeout.
    stand_in = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--dltune-probe-child", "nvml"]
    )
    try:
        time.sleep(1.5)
        before = set(_probe_children())
        _, rc, doc = _timed_audit(fake_nvml_dir, "healthy_8gpu", "--only", "driver", "--nvml-timeout", "1")
        loaded = next(r for r in doc["results"] if r["id"] == "driver.loaded")
        assert rc == 1 and loaded["status"] == "fail", loaded
        assert f"pid {stand_in.pid}" in loaded["summary"] and "still stuck" in loaded["summary"]
        assert set(_probe_children()) <= before
    finally:
        stand_in.kill()
        stand_in.wait()


def test_the_audit_timeout_prints_what_finished_and_names_what_did_not(
    fake_nvml_dir: Path, no_stuck_children: None
) -> None:
    """NVML allowed 30 s but the whole audit only 2 s: the envelope still comes, with every other
    area's results and a critical system.audit_timeout fail naming NVML."""
    elapsed, rc, doc = _timed_audit(
        fake_nvml_dir,
        "hung_init",
        "--timeout",
        "2",
        "--nvml-timeout",
        "30",
        "--only",
        "system,gpu,driver,env",
    )
    assert elapsed < 20, elapsed
    results = {r["id"]: r for r in doc["results"]}
    timeout = results["system.audit_timeout"]
    assert rc == 1 and timeout["status"] == "fail" and timeout["critical"], timeout
    assert "NVML" in timeout["summary"]
    assert results["system.reboot_required"]["status"] in ("pass", "warn")
    assert "env.cublas_workspace" in results


def test_gpus_a_job_cgroup_hides_are_not_lost(fake_nvml_dir: Path) -> None:
    """Inside a Slurm job, NVML answers "Insufficient Permissions" for the GPUs the job was not given:
    not a lost GPU, never critical (`--slurm-drain` inside a job must not drain a healthy node)."""
    rc, results = audit(fake_nvml_dir, "job_cgroup")
    assert rc == 0
    present = statuses(results, "gpu.present")
    assert present == {None: "pass"}, present
    summary = results[("gpu.present", None)]
    assert summary["critical"] is False and "2 more not readable" in summary["summary"]
    assert summary["evidence"]["unreadable"] == 2 and summary["evidence"]["healthy"] == 2
    ecc = statuses(results, "gpu.ecc")
    assert ecc == {"0": "pass", "1": "pass", "2": "skip", "3": "skip"}
    assert "device cgroup" in results[("gpu.ecc", "2")]["summary"]


def test_clock_events_are_judged_over_a_window_not_one_mask(fake_nvml_dir: Path) -> None:
    """A power cap at the default limit is a loaded GPU's normal state; a lowered limit is a finding; a
    hardware slowdown seen once is a warning, one that persists (counter share, or both mask reads
    where the driver has no counters) is critical."""
    rc, results = audit(fake_nvml_dir, "clock_events")
    assert rc == 1
    clocks = statuses(results, "gpu.clocks")
    assert clocks == {"0": "pass", "1": "warn", "2": "warn", "3": "fail", "4": "fail", "5": "warn"}, clocks
    assert "normal state" in results[("gpu.clocks", "0")]["summary"]
    assert "lowered to 400 W (default 700 W)" in results[("gpu.clocks", "1")]["summary"]
    transient = results[("gpu.clocks", "2")]
    assert transient["critical"] is False and "not sustained" in transient["summary"]
    held = results[("gpu.clocks", "3")]
    assert held["critical"] is True and "hw power brake" in held["summary"]
    assert held["evidence"]["share_of_window"]["hw power brake"] >= 0.85
    assert results[("gpu.clocks", "4")]["critical"] is True
    assert "both reads" in results[("gpu.clocks", "4")]["summary"]
    assert results[("gpu.clocks", "5")]["critical"] is False


POWER_SCRIPT = """
import json, sys, time
from dltune.bench.measure import PowerMeter
meter = PowerMeter(sys.argv[1])
meter.start()
time.sleep(float(sys.argv[2]))
r = meter.stop()
print(json.dumps({"peak_w": r.peak_w, "source": r.peak_source, "joules": r.joules, "window": r.window_s,
                  "skipped": r.skipped}))
"""


def _power(library_dir: Path, scenario: str, uuid: str, seconds: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", POWER_SCRIPT, uuid, str(seconds)],
        capture_output=True,
        text=True,
        env=_fake_env(library_dir, scenario),
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_bench_power_reads_the_gpu_torch_measures_by_uuid(fake_nvml_dir: Path) -> None:
    """NVML ignores CUDA_VISIBLE_DEVICES: in a job given GPUs 4,5, torch's cuda:0 is NVML's GPU 4. The
    meter finds it by UUID; energy comes from the total-energy counter (power x time here), the peak
    from the instantaneous field."""
    reading = _power(fake_nvml_dir, "bench_power", "GPU-00000000-0000-0000-0000-000000000004", 2.2)
    assert reading["skipped"] is None, reading
    assert reading["peak_w"] == pytest.approx(690.0) and reading["source"] == "instantaneous"
    assert reading["joules"] == pytest.approx(650.0 * reading["window"], rel=0.05)


def test_bench_power_skips_with_the_reason_nvml_gives(fake_nvml_dir: Path) -> None:
    """A device the job's cgroup denies, and a window too short for the energy counter: reasons, not 0 W."""
    denied = _power(fake_nvml_dir, "bench_power", "GPU-00000000-0000-0000-0000-000000000002", 0.1)
    assert denied["peak_w"] is None and "Insufficient Permissions" in denied["skipped"]
    unknown = _power(fake_nvml_dir, "bench_power", "GPU-ffffffff-0000-0000-0000-000000000009", 0.1)
    assert unknown["peak_w"] is None and "NVML has no device" in unknown["skipped"]
    short = _power(fake_nvml_dir, "bench_power", "GPU-00000000-0000-0000-0000-000000000004", 0.3)
    assert short["joules"] is None and "under the 2 s" in short["skipped"]
    assert short["peak_w"] == pytest.approx(690.0)
    # A driver without the instantaneous field: the 1 s average, labelled as such.
    averaged = _power(fake_nvml_dir, "bench_power", "GPU-00000000-0000-0000-0000-000000000005", 0.3)
    assert averaged["peak_w"] == pytest.approx(640.0) and averaged["source"] == "1 s average"


def test_bench_on_a_node_whose_gpus_pytorch_cannot_see_stops_with_the_reason(fake_nvml_dir: Path) -> None:
    """NVML (the fake library) sees eight GPUs; this machine's PyTorch sees no CUDA device. The bench
    exits 2 naming both, instead of benchmarking the CPU and passing."""
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "bench", "--quick", "--format", "json"],
        capture_output=True,
        text=True,
        env=_fake_env(fake_nvml_dir, "healthy_8gpu"),
        check=False,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "NVML sees 8 GPU(s) but PyTorch sees no CUDA device" in done.stderr
    assert "--device cpu" in done.stderr


def dltune_with_scenario(
    library_dir: Path, scenario: Path, *args: str, timeout: int = 120
) -> subprocess.CompletedProcess[str]:
    """dltune against the fake NVML with a scenario file written by the test itself."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(library_dir), "DLTUNE_FAKE_NVML_SCENARIO": str(scenario)}
    return subprocess.run(
        [sys.executable, "-m", "dltune.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=timeout,
    )


def test_check_leaves_a_gpu_a_job_is_using_alone(fake_nvml_dir: Path, tmp_path: Path) -> None:
    """Compute processes on a GPU (a job): `dltune check` audits, then skips its bench, naming them."""
    scenario = tmp_path / "busy.conf"
    scenario.write_text("gpus=2\ngpu1.processes=2\n")
    done = dltune_with_scenario(fake_nvml_dir, scenario, "check", "--format", "json")
    results = json.loads(done.stdout)["results"]
    gate = results[-1]
    assert gate["id"] == "bench.run" and gate["status"] == "skip", gate
    assert "GPU 1: pid 4000, 4001" in gate["summary"] and gate["evidence"]["compute_pids"] == {
        "1": [4000, 4001]
    }
    assert any(r["id"] == "gpu.persistence" for r in results)
    assert not any(r["id"] == "bench.matmul" for r in results)


def test_busy_gpus_on_a_node_without_slurm_are_not_called_left_behind(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    """No Slurm client on this machine: processes on a GPU are nobody's business but their owner's."""
    scenario = tmp_path / "busy.conf"
    scenario.write_text("gpus=2\ngpu0.processes=1\n")
    if shutil.which("squeue"):
        pytest.skip("this machine has a Slurm client: the lab test judges processes against real jobs")
    done = dltune_with_scenario(
        fake_nvml_dir, scenario, "audit", "--only", "gpu", "--format", "json", timeout=60
    )
    [result] = [r for r in json.loads(done.stdout)["results"] if r["id"] == "gpu.processes"]
    assert (
        result["status"] == "pass"
        and "GPU 0: pid 4000" in result["summary"]
        and "no Slurm" in result["summary"]
    )


def test_a_power_limit_lowered_by_hand_warns(fake_nvml_dir: Path) -> None:
    """nvidia-smi -pl 300 on one GPU of an H100 node (700 W default): that GPU warns, the other passes."""
    _, results = audit(fake_nvml_dir, "power_lowered")
    assert statuses(results, "gpu.power_limit") == {"0": "pass", "1": "warn"}
    assert "300 W (default 700 W)" in results[("gpu.power_limit", "1")]["summary"]


def test_nvlinks_bus_ids_and_firmware_through_pynvml(fake_nvml_dir: Path) -> None:
    """NVLink state and error counters, PCI bus ids and VBIOS/InfoROM versions, read by the real
    pynvml calls (nvmlDeviceGetNvLinkState/ErrorCounter, GetPciInfo_v3, GetVbiosVersion,
    GetInforomImageVersion) from the fake library."""
    rc, results = audit(fake_nvml_dir, "hgx_nvlink_faults", only="gpu,fabric")
    assert rc == 1
    nvlink = {subject: r for (cid, subject), r in results.items() if cid == "fabric.nvlink"}
    assert nvlink["3"]["status"] == "fail" and nvlink["3"]["critical"]
    assert nvlink["3"]["evidence"]["down"] == [4, 7]
    assert nvlink["5"]["status"] == "warn" and "recovery 12" in nvlink["5"]["summary"]
    assert {nvlink[str(i)]["status"] for i in (0, 1, 2, 4, 6, 7)} == {"pass"}
    assert "all 18 NVLinks active" in nvlink["0"]["summary"]
    manager = results[("fabric.fabric_manager", None)]
    assert manager["status"] == "fail" and manager["critical"] and "GPU 7 not started" in manager["summary"]
    clocks = statuses(results, "gpu.app_clocks")
    assert clocks["2"] == "warn" and {clocks[str(i)] for i in range(8) if i != 2} == {"pass"}
    firmware = results[("gpu.firmware", None)]
    assert firmware["status"] == "warn" and "96.00.61.00.01 on GPU 6" in firmware["summary"]
    child = subprocess.run(
        [sys.executable, "-m", "dltune.probes.nvml_read", CHILD_MARKER, "nvml"],
        capture_output=True,
        text=True,
        env=scenario_env(fake_nvml_dir, "hgx_nvlink_faults"),
        check=True,
        timeout=60,
    )
    gpus = json.loads(child.stdout)["gpus"]
    assert [g["pci_bus_id"] for g in gpus[:2]] == ["0000:18:00.0", "0000:28:00.0"]
    assert gpus[0]["inforom_image"] == "G520.0200.00.05" and len(gpus[0]["nvlinks"]) == 18


@pytest.mark.parametrize(("scenario", "critical"), [("healthy_8gpu", False), ("hung_gpu", True)])
def test_dcgm_out_of_time_drains_only_when_nvml_hangs_too(
    fake_nvml_dir: Path, tmp_path: Path, scenario: str, critical: bool
) -> None:
    """A `dcgmi` stand-in on PATH that never answers (DCGM cannot run here), beside the fake NVML:
    with the GPUs answering NVML, the diagnostic that ran out of time is a fail that is not critical
    (`--slurm-drain` leaves the node in service); with NVML hung as well, it is critical."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dcgmi").write_text("#!/bin/sh\ntrap '' TERM\nsleep 300\n")
    (bin_dir / "dcgmi").chmod(0o755)
    env = {**scenario_env(fake_nvml_dir, scenario), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "audit", "--only", "gpu", "--dcgm", "--timeout", "8",
         "--nvml-timeout", "3", "--format", "json"],
        capture_output=True, text=True, env=env, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    dcgm = next(r for r in json.loads(done.stdout)["results"] if r["id"] == "gpu.dcgm")
    assert dcgm["status"] == "fail" and dcgm["critical"] is critical, dcgm
