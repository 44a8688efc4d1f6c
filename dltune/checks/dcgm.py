"""DCGM's diagnostic as gpu results: each test that failed or warned is a ``gpu.dcgm_<test>`` result
in DCGM's own words; the tests that passed are one ``gpu.dcgm`` result. Asked for only
(`dltune audit --dcgm`, `dltune check --dcgm N`): without it the check says nothing.

A diagnostic vouches only for the GPUs DCGM sees. Where DCGM's own list was read after it
(`dcgmi discovery -l`, the audit's --dcgm), gpu.dcgm is a pass only when DCGM names every GPU NVML
sees by the same UUID and PCI bus id: a GPU it cannot name (NVIDIA/DCGM#229: "<<<NULL>>>" for every
H100), misses or knows by another identity is a fail, and a list that could not be read an error."""

from __future__ import annotations

import re

from dltune.checks import check
from dltune.model import Result, Status
from dltune.snapshot import DcgmDiag, DcgmDiscovery, DcgmGpu, DcgmTest, Gpu, NvmlState, Snapshot

DCGM_REMEDY = (
    "drain the node and read DCGM's message above; rerun the test alone (dcgmi diag -r <test> -v) "
    "and follow NVIDIA's field diagnostic for the GPU it names"
)
_VERDICT = {"fail": Status.FAIL, "unknown": Status.FAIL, "warn": Status.WARN}
DISCOVERY_REMEDY = (
    "compare `dcgmi discovery -l` with `nvidia-smi -L`, restart DCGM's host engine (systemctl restart "
    "nvidia-dcgm) and rerun `dltune audit --dcgm`; a GPU DCGM cannot name or does not list was not "
    "tested by it (every name <<<NULL>>> again: NVIDIA/DCGM#229, send nv-hostengine's debug log)"
)


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
    return _test_results(diag, evidence, snap.nvml)


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


def _test_results(diag: DcgmDiag, evidence: dict[str, object], nvml: NvmlState) -> list[Result]:
    results = [_finding(test, diag) for test in diag.tests if test.status in _VERDICT]
    passed = [t.name for t in diag.tests if t.status == "pass"]
    skipped = [t.name for t in diag.tests if t.status == "skip"]
    described = f"DCGM level {diag.level}" + (f" (DCGM {diag.version})" if diag.version else "")
    # A pass needs a test that passed: a run whose tests were all skipped, or that listed none, vouches
    # for nothing (it said "0 test(s) passed", a pass).
    status = Status.PASS if passed else Status.SKIP
    summary = (
        f"{described}: "
        + (
            f"{len(passed)} test(s) passed"
            if passed
            else "no test passed"
            if diag.tests
            else "no test in its output"
        )
        + (f", {len(skipped)} skipped ({', '.join(skipped)})" if skipped else "")
        + (f", {len(results)} with findings (gpu.dcgm_*)" if results else "")
    )
    evidence = {**evidence, "passed": passed, "skipped": skipped}
    if diag.discovery is None:  # not listed (`dltune check --dcgm N`): the diagnostic's word alone
        results.append(Result("gpu.dcgm", status, summary, evidence=evidence))
    else:
        results.append(_vouched(status, summary, evidence, diag.discovery, nvml))
    return results


def _vouched(
    status: Status, summary: str, evidence: dict[str, object], discovery: DcgmDiscovery, nvml: NvmlState
) -> Result:
    """gpu.dcgm as far as DCGM sees the GPUs NVML sees. Whatever the tests said (passed, or all
    skipped or with findings), a DCGM that lists the GPUs otherwise fails and one whose list could not
    be read is an error: its diagnostic then vouches for no GPU. Without NVML's answer there is
    nothing to compare with (the gpu checks judge NVML): the diagnostic's word stands, saying so."""
    listing = _listing(discovery)
    if discovery.error is not None:
        return Result(
            "gpu.dcgm",
            Status.ERROR,
            f"DCGM's own GPU list could not be read (`{discovery.command}`: {discovery.error}), so its "
            f"diagnostic vouches for no GPU: {summary}, not counted as a pass",
            evidence={**evidence, "discovery": {**listing, "timed_out": discovery.timed_out}},
            remedy="run `dcgmi discovery -l` by hand; a host engine that does not answer it: systemctl "
            "restart nvidia-dcgm",
        )
    if not nvml.available or nvml.hung:
        why = nvml.error or "it did not answer"
        return Result(
            "gpu.dcgm",
            status,
            f"{summary}; DCGM's GPU list not compared with NVML's: NVML {why}",
            evidence={**evidence, "discovery": {**listing, "compared": False}},
        )
    problems, unidentified = compare_gpus(nvml.gpus, discovery.gpus)
    listing = {
        **listing,
        "compared": True,
        "nvml_gpus": [{"index": g.index, "pci_bus_id": g.pci_bus_id, "uuid": g.uuid} for g in nvml.gpus],
        "nvml_unidentified": unidentified,
        "problems": problems,
    }
    if problems:
        return Result(
            "gpu.dcgm",
            Status.FAIL,
            f"DCGM's view of the GPUs is not NVML's: {'; '.join(problems)}"
            + (f" ({discovery.note})" if discovery.note else "")
            + f"; its diagnostic vouches for none of them: {summary}, not counted as a pass",
            evidence={**evidence, "discovery": listing},
            remedy=DISCOVERY_REMEDY,
        )
    return Result(
        "gpu.dcgm",
        status,
        f"{summary}; DCGM lists the {len(discovery.gpus)} GPU(s) NVML sees by the same UUID and bus id",
        evidence={**evidence, "discovery": listing},
    )


def _listing(discovery: DcgmDiscovery) -> dict[str, object]:
    """DCGM's listing as evidence: what it printed, parsed."""
    return {
        "command": discovery.command,
        "returncode": discovery.returncode,
        "gpus": [
            {
                "gpu_id": g.gpu_id,
                "name": g.name,
                "pci_bus_id": g.pci_bus_id,
                "uuid": g.uuid,
                "said": list(g.said),
            }
            for g in discovery.gpus
        ],
        "note": discovery.note,
        "messages": list(discovery.messages),
    }


def blank(value: str | None) -> bool:
    """No value, or DCGM's marker for one it could not fill: DCGM_STR_IS_BLANK in dcgm_structs.h
    ("<<<" first, ">>>" after it: <<<NULL>>>, <<<NOT_FOUND>>>, <<<NOT_SUPPORTED>>>, <<<NOT_PERM>>>)."""
    return not value or (value.startswith("<<<") and ">>>" in value)


def compare_gpus(nvml: tuple[Gpu, ...], listed: tuple[DcgmGpu, ...]) -> tuple[list[str], int]:
    """What differs between NVML's GPUs and DCGM's, and how many of NVML's it could not identify.

    Pairs by UUID, then what is left by PCI bus id (a side that lacks a value is not compared on it);
    a GPU DCGM lists with neither (its blank markers, or an attributes error) is said once and never
    paired, so NVML's GPU it may be counts as not listed.
    NVML's GPUs without UUID or bus id (lost, or refused to this process) cannot be paired: as many of
    DCGM's GPUs as there are of them may be those and are not counted against DCGM."""
    unnamed: dict[str, list[str]] = {}  # what DCGM printed -> its GPU IDs (DCGM#229: all alike)
    for g in listed:
        if blank(g.name):
            unnamed.setdefault(_printed(g), []).append(str(g.gpu_id))
    problems = [f"DCGM cannot name GPU {', '.join(ids)} ({printed})" for printed, ids in unnamed.items()]
    faceless = [g for g in listed if blank(g.uuid) and blank(g.pci_bus_id)]
    problems += [
        f"DCGM cannot identify GPU {g.gpu_id} ({_printed(g)})" for g in faceless if not blank(g.name)
    ]
    known = [g for g in nvml if g.uuid or g.pci_bus_id]
    left = [g for g in listed if g not in faceless]  # said above; never paired
    by_bus: list[Gpu] = []
    for gpu in known:
        twin = next((d for d in left if gpu.uuid and d.uuid == gpu.uuid), None)
        if twin is None:
            by_bus.append(gpu)
            continue
        left.remove(twin)
        if gpu.pci_bus_id and twin.pci_bus_id != gpu.pci_bus_id:
            problems.append(
                f"DCGM's GPU {twin.gpu_id} is NVML's GPU {gpu.index} ({gpu.uuid}) at bus id "
                f"{twin.pci_bus_id or 'none'}, NVML's at {gpu.pci_bus_id}"
            )
    missing = []
    for gpu in by_bus:
        twin = next((d for d in left if gpu.pci_bus_id and d.pci_bus_id == gpu.pci_bus_id), None)
        if twin is None:
            missing.append(f"{gpu.index} ({gpu.uuid or gpu.pci_bus_id})")
            continue
        left.remove(twin)
        if gpu.uuid and twin.uuid != gpu.uuid:
            problems.append(
                f"at {gpu.pci_bus_id} DCGM's GPU {twin.gpu_id} is {twin.uuid or 'without a UUID'}, "
                f"NVML's GPU {gpu.index} {gpu.uuid}"
            )
    if missing:
        problems.append(f"DCGM does not list NVML's GPU {', '.join(missing)}")
    unidentified = len(nvml) - len(known)
    if len(left) > unidentified:
        others = ", ".join(f"{d.gpu_id} ({d.uuid or d.pci_bus_id or 'no identity'})" for d in left)
        problems.append(f"DCGM lists GPU {others}, which NVML does not have")
    return problems, unidentified


def _printed(gpu: DcgmGpu) -> str:
    """What DCGM printed for a GPU it cannot name or identify."""
    shown = [f"Name: {gpu.name}" if gpu.name is not None else "no Name line"]
    if not blank(gpu.name):
        shown += [f"PCI Bus ID: {gpu.pci_bus_id or 'none'}", f"Device UUID: {gpu.uuid or 'none'}"]
    return "; ".join([*shown, *gpu.said])


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
