"""GPU health beyond the tunings. gpu.processes: compute processes on a GPU while Slurm runs no job on
the node were left behind by a job; gpu.power_limit: an enforced power limit below the default.
Judged on snapshots (no GPU exists here: NVML's answers are given as the probe would read them), and
the squeue probe through recorded command outputs."""

from __future__ import annotations

import pytest

from dltune.checks.gpu import power_limit, processes
from dltune.model import Status
from dltune.probes.jobenv import slurm_jobs_on
from dltune.probes.runner import RecordedRunner
from dltune.snapshot import Gpu, NvmlState, SlurmJobs, Snapshot

SQUEUE = "squeue --noheader --nodelist gpu07 --format %A"


def snap(pids: list[tuple[int, ...] | None], jobs: SlurmJobs | None) -> Snapshot:
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", compute_pids=p) for i, p in enumerate(pids))
    return Snapshot(root="/", nvml=NvmlState(True, driver_version="580.95.05", gpus=gpus), slurm_jobs=jobs)


def test_processes_while_slurm_runs_no_job_here_were_left_behind() -> None:
    [result] = processes(snap([(), (4000, 4001)], SlurmJobs((), node="gpu07")))
    assert result.status is Status.FAIL and result.critical
    assert "GPU 1: pid 4000, 4001" in result.summary and "gpu07" in result.summary
    assert result.evidence["compute_pids"] == {"1": [4000, 4001]} and "kill" in (result.remedy or "")


def test_processes_of_a_running_job_are_its_own() -> None:
    [result] = processes(snap([(4000,)], SlurmJobs(("1234",), node="gpu07")))
    assert result.status is Status.PASS and "1234" in result.summary


@pytest.mark.parametrize(
    ("jobs", "status"),
    [
        (SlurmJobs(error="squeue is not installed", installed=False, node="gpu07"), Status.PASS),
        (SlurmJobs(error="squeue failed: Unable to contact slurm controller", node="gpu07"), Status.WARN),
    ],
)
def test_without_an_answer_from_slurm_nothing_is_called_left_behind(jobs: SlurmJobs, status: Status) -> None:
    [result] = processes(snap([(4000,)], jobs))
    assert result.status is status and not result.critical


def test_idle_gpus_pass_and_an_old_driver_skips() -> None:
    assert [r.status for r in processes(snap([(), ()], None))] == [Status.PASS]
    assert [r.status for r in processes(snap([None], None))] == [Status.SKIP]
    assert [r.status for r in processes(Snapshot(root="/"))] == [Status.SKIP]


def test_the_squeue_probe_reads_job_ids_and_says_why_it_could_not() -> None:
    running = RecordedRunner({SQUEUE: {"stdout": "1234\n1240\n"}})
    assert slurm_jobs_on(running, "gpu07") == SlurmJobs(("1234", "1240"), node="gpu07")
    assert running.calls == [tuple(SQUEUE.split())]
    idle = slurm_jobs_on(RecordedRunner({SQUEUE: {"stdout": ""}}), "gpu07")
    assert idle.job_ids == () and idle.error is None
    down = slurm_jobs_on(
        RecordedRunner(
            {
                SQUEUE: {
                    "returncode": 1,
                    "stderr": "squeue: error: Unable to contact slurm controller (connect failure)\n",
                }
            }
        ),
        "gpu07",
    )
    assert down.error == "squeue failed: squeue: error: Unable to contact slurm controller (connect failure)"
    missing = slurm_jobs_on(RecordedRunner({}), "gpu07")
    assert not missing.installed and missing.job_ids == ()


def test_a_lowered_power_limit_warns_and_the_default_passes() -> None:
    def judged(limit: float | None, default: float | None) -> Status:
        gpu = Gpu(index=0, uuid="GPU-0", power_limit_w=limit, power_default_limit_w=default)
        [result] = power_limit(Snapshot(root="/", nvml=NvmlState(True, gpus=(gpu,))))
        return result.status

    assert judged(300.0, 700.0) is Status.WARN
    assert judged(700.0, 700.0) is Status.PASS
    assert judged(699.0, 700.0) is Status.PASS  # a default that reads a watt off is no change
    assert judged(None, 700.0) is Status.SKIP
