"""DCGM's diagnostic as gpu results: each test that failed or warned is a ``gpu.dcgm_<test>`` result
in DCGM's own words; the tests that passed are one ``gpu.dcgm`` result. Asked for only
(`dltune audit --dcgm`, `dltune check --dcgm N`): without it the check says nothing."""

from __future__ import annotations

import re

from dltune.checks import check
from dltune.model import Result, Status
from dltune.snapshot import DcgmDiag, DcgmTest, Snapshot

DCGM_REMEDY = (
    "drain the node and read DCGM's message above; rerun the test alone (dcgmi diag -r <test> -v) "
    "and follow NVIDIA's field diagnostic for the GPU it names"
)
_VERDICT = {"fail": Status.FAIL, "unknown": Status.FAIL, "warn": Status.WARN}


def result_id(test_name: str) -> str:
    """ "Page Retirement/Row Remap" -> "gpu.dcgm_page_retirement_row_remap"."""
    return "gpu.dcgm_" + (re.sub(r"[^a-z0-9]+", "_", test_name.lower()).strip("_") or "unnamed")


@check("gpu.dcgm")
def dcgm(snap: Snapshot) -> list[Result]:
    diag = snap.dcgm
    if diag is None:
        return []
    if not diag.installed:
        return [Result("gpu.dcgm", Status.SKIP, diag.error or "DCGM is not installed")]
    evidence = {
        "command": diag.command,
        "level": diag.level,
        "dcgm_version": diag.version,
        "returncode": diag.returncode,
    }
    if diag.timed_out:
        return [_ran_out_of_time(diag, snap, evidence)]
    if diag.error is not None:
        unsupported = "unsupported" in diag.error.lower()
        return [
            Result(
                "gpu.dcgm",
                Status.SKIP if unsupported else Status.FAIL,
                f"DCGM's diagnostic did not run: {diag.error}",
                evidence=evidence,
                remedy=None
                if unsupported
                else "start DCGM's host engine (systemctl start nvidia-dcgm) and run the command by hand",
            )
        ]
    return _test_results(diag, evidence)


def _ran_out_of_time(diag: DcgmDiag, snap: Snapshot, evidence: dict[str, object]) -> Result:
    """A diagnostic that did not finish is a fail; critical only when the GPUs do not answer either.
    While NVML answers, the diagnostic ran out of time (a slow node, a limit set too short), not the
    GPU: draining a healthy node for it is what the measured-timeout defaults exist to avoid."""
    gpus_answer = snap.nvml.available and not snap.nvml.hung
    evidence = {**evidence, "nvml_answers": gpus_answer, "nvml_error": snap.nvml.error}
    if gpus_answer:
        return Result(
            "gpu.dcgm",
            Status.FAIL,
            f"`{diag.command}` did not finish ({diag.error}) while NVML still answers: the diagnostic ran "
            "out of time, which says nothing about the GPUs yet",
            evidence=evidence,
            remedy=f"rerun with a longer limit (dltune check --dcgm {diag.level} --dcgm-timeout SECONDS)"
            " when no job runs; a rerun that also runs out of time is a fault to chase with"
            " nv-hostengine's log",
        )
    return Result(
        "gpu.dcgm",
        Status.FAIL,
        f"`{diag.command}` did not finish ({diag.error}) and NVML does not answer either "
        f"({snap.nvml.error or 'hung'}): a GPU or the driver hangs",
        evidence=evidence,
        remedy="drain the node; check nv-hostengine and the GPUs (nvidia-smi), then rerun the level",
        critical=True,
    )


def _test_results(diag: DcgmDiag, evidence: dict[str, object]) -> list[Result]:
    results = [_finding(test, diag) for test in diag.tests if test.status in _VERDICT]
    passed = [t.name for t in diag.tests if t.status == "pass"]
    skipped = [t.name for t in diag.tests if t.status == "skip"]
    described = f"DCGM level {diag.level}" + (f" (DCGM {diag.version})" if diag.version else "")
    results.append(
        Result(
            "gpu.dcgm",
            Status.PASS if passed or not results else Status.SKIP,
            f"{described}: {len(passed)} test(s) passed"
            + (f", {len(skipped)} skipped ({', '.join(skipped)})" if skipped else "")
            + (f", {len(results)} with findings (gpu.dcgm_*)" if results else ""),
            evidence={**evidence, "passed": passed, "skipped": skipped},
        )
    )
    return results


def _finding(test: DcgmTest, diag: DcgmDiag) -> Result:
    gpus = sorted(gpu for gpu, status in test.per_gpu.items() if status in _VERDICT)
    said = "; ".join(test.warnings) or "no message"
    status = _VERDICT[test.status]
    word = {"fail": "failed", "warn": "warned", "unknown": "ended with a status dltune does not know"}[
        test.status
    ]
    return Result(
        result_id(test.name),
        status,
        f"DCGM level {diag.level} test {test.name} {word}"
        + (" on every GPU" if gpus == ["all"] else f" on GPU {', '.join(gpus)}" if gpus else "")
        + f": {said}",
        evidence={
            "test": test.name,
            "per_gpu": dict(test.per_gpu),
            "warnings": list(test.warnings),
            "command": diag.command,
        },
        remedy=DCGM_REMEDY,
        critical=status is Status.FAIL,
    )
