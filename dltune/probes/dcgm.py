"""DCGM's diagnostics: `dcgmi diag -r <level> -j`, run under a deadline, its JSON parsed.

Level 1 (deployment checks) takes seconds and changes nothing: `dltune audit --dcgm` runs it. Levels
2 and 3 run GPU workloads for minutes: `dltune check --dcgm 2|3`. A diagnostic can hang on a faulty
GPU, so DCGM is given its own `--timeout` (it then aborts the diagnostic itself, on the GPUs) and the
client is killed a little later if it still has not answered.

Two JSON shapes exist: DCGM 3.x nests everything under "DCGM GPU Diagnostic" > "test_categories"
with one result per GPU ("gpu_ids"/"gpu_id"); DCGM 4.x writes "DCGM Diagnostic" with results per
entity ("entity_id") and a per-test "test_summary". Both are read; a status word this parser does
not know is never read as a pass.

A diagnostic vouches only for the GPUs DCGM sees: after one that ran, `dcgmi discovery -l` lists them
(ID, name, PCI bus id, UUID; read-only, a few hundred ms through the host engine), for gpu.dcgm to
compare with NVML's. It has no JSON form, so its table is read: DCGM 2.x-4.4 print "N GPUs found.",
4.5+ "N GPUs found (Active)." with a note when some are not active, then NvSwitch, and from 3.3 and
4.3 CPU and ConnectX tables, each after its own "N ... found." line.
"""

from __future__ import annotations

import re
from typing import Any

from dltune.files import safeio
from dltune.probes.runner import CommandRunner
from dltune.probes.watchdog import Deadline
from dltune.records import replace
from dltune.snapshot import DcgmDiag, DcgmDiscovery, DcgmGpu, DcgmTest
from dltune.text import decimal

# Seconds DCGM may run each level when nothing shorter is asked. From measurements on 8-GPU nodes, not
# NVIDIA's per-GPU estimates: level 2 took 2.5-10.5 min and level 4 45 min-2.25 h there
# (aws-samples/awsome-distributed-training, 4.validation_and_observability/0.gpu-cluster-healthcheck),
# so each limit is above the slowest figure published (level 3 between them); a healthy node must never
# run out of time, since a diagnostic that does not finish is a finding.
DCGM_TIMEOUT_S = {1: 60.0, 2: 900.0, 3: 2700.0, 4: 9000.0}
# The client waits this long past DCGM's own timeout for DCGM to abort and answer.
CLIENT_GRACE_S = 5.0
_STATUSES = {
    "pass": "pass",
    "passed": "pass",
    "fail": "fail",
    "failed": "fail",
    "warn": "warn",
    "warning": "warn",
    "skip": "skip",
    "skipped": "skip",
    "not run": "skip",
}
_ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
# `dcgmi discovery -l` answers in a few hundred ms; a host engine that needs more than this to list
# its GPUs does not vouch for them. The audit's deadline may leave less; under a second it is not run.
DISCOVERY_TIMEOUT_S = 10.0
DISCOVERY_MIN_S = 1.0
DISCOVERY_COMMAND = ("dcgmi", "discovery", "-l")
_FOUND = re.compile(r"([0-9]{1,9}) (GPUs?|NvSwitch(?:es)?|ConnectX|CPUs?) found\b")  # ASCII digits only
_ROW = re.compile(r"\|([^|]*)\|(.*)\|")
_FIELD = re.compile(r"(Name|PCI Bus ID|Device UUID):\s*(.*)")
_FIELDS = {"Name": "name", "PCI Bus ID": "pci_bus_id", "Device UUID": "uuid"}
_BUS_ID = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])")


def read_dcgm(runner: CommandRunner, level: int, deadline: Deadline) -> DcgmDiag:
    """The audit's DCGM: the diagnostic within what is left of the audit's time (DCGM aborts it itself
    when late), then, where it ran, the GPUs DCGM lists, within what is left after it."""
    seconds = deadline.limit(DCGM_TIMEOUT_S[level] + CLIENT_GRACE_S) - CLIENT_GRACE_S
    if seconds < 1:
        deadline.missed["dcgm"] = "DCGM's diagnostic (gpu area): not enough of the audit's --timeout left"
        return DcgmDiag(
            level, "dcgmi diag", timed_out=True, error="not run: the audit's --timeout was too short"
        )
    diag = run_dcgm_diag(runner, level, seconds)
    if diag.error is not None or not diag.tests:
        return diag  # nothing DCGM said about the GPUs for the listing to vouch for
    listing = deadline.limit(DISCOVERY_TIMEOUT_S)
    if listing < DISCOVERY_MIN_S:
        deadline.missed["dcgm_discovery"] = (
            "DCGM's GPU list (gpu area): not enough of the audit's --timeout left"
        )
        discovery = DcgmDiscovery(
            " ".join(DISCOVERY_COMMAND), timed_out=True, error="not run: the audit's --timeout was too short"
        )
        return replace(diag, discovery=discovery)
    return replace(diag, discovery=run_dcgm_discovery(runner, listing))


def run_dcgm_diag(runner: CommandRunner, level: int, timeout: float) -> DcgmDiag:
    """Run the diagnostic at ``level``, DCGM aborting it after ``timeout`` seconds."""
    dcgm_seconds = max(1, int(timeout))
    argv = ["dcgmi", "diag", "-r", str(level), "-j", "--timeout", str(dcgm_seconds)]
    done = runner.run(argv, timeout=dcgm_seconds + CLIENT_GRACE_S)
    command = " ".join(argv)
    if done.returncode == 127 and not done.stdout:
        return DcgmDiag(level, command, installed=False, error="DCGM is not installed (no dcgmi on PATH)")
    if done.returncode == 124 and not done.stdout:
        return DcgmDiag(
            level, command, timed_out=True, error=f"no answer within {dcgm_seconds + CLIENT_GRACE_S:g} s"
        )
    tests, version, problem = parse_dcgm_diag(done.stdout)
    said = (done.stdout.strip() or done.stderr.strip())[-400:]
    if problem is not None and _said_timeout(done.stdout + done.stderr):
        # DCGM aborted the diagnostic itself at --timeout: it ran out of time, as a killed client does.
        return DcgmDiag(
            level, command, returncode=done.returncode, timed_out=True,
            error=f"DCGM stopped it at its --timeout of {dcgm_seconds} s: {said}",
        )  # fmt: skip
    if problem is not None:
        return DcgmDiag(level, command, returncode=done.returncode, error=f"{problem}: {said or 'no output'}")
    return DcgmDiag(level, command, returncode=done.returncode, tests=tests, version=version)


def _said_timeout(text: str) -> bool:
    lowered = text.lower()
    return "timed out" in lowered or ("timeout" in lowered and "--timeout" not in lowered)


def parse_dcgm_diag(text: str) -> tuple[tuple[DcgmTest, ...], str | None, str | None]:
    """(tests, DCGM version, why not) from `dcgmi diag -j`'s output; text before the JSON (a banner
    such as "Successfully ran diagnostic for group.") is skipped."""
    start = text.find("{")
    if start < 0:
        return (), None, "dcgmi printed no JSON"
    try:
        data = safeio.decode_first(text[start:])
    except ValueError as exc:  # bad syntax, nested too deep, a non-finite number
        return (), None, f"dcgmi's JSON is not readable ({exc})"
    if not isinstance(data, dict):
        return (), None, "dcgmi's JSON is not an object"
    root: Any = next((data[key] for key in _ROOTS if isinstance(data.get(key), dict)), data)
    raw_tests = [
        test
        for category in root.get("test_categories") or []
        if isinstance(category, dict)
        for test in category.get("tests") or []
        if isinstance(test, dict)
    ] or [test for test in root.get("tests") or [] if isinstance(test, dict)]
    if not raw_tests:
        return (), _version(data, root), "dcgmi's JSON holds no test results"
    return tuple(_test(raw) for raw in raw_tests), _version(data, root), None


def _version(data: dict[str, Any], root: dict[str, Any]) -> str | None:
    for holder in (data.get("metadata"), root, data):
        if isinstance(holder, dict) and isinstance(holder.get("version"), str):
            return str(holder["version"])
    return None


def _status(raw: Any) -> str:
    return _STATUSES.get(" ".join(str(raw).lower().split()), "unknown")


def _messages(result: dict[str, Any], key: str) -> list[str]:
    found = []
    for item in result.get(key) or []:
        text = item.get("warning") or item.get("info") if isinstance(item, dict) else item
        if text:
            found.append(str(text))
    return found


def _test(raw: dict[str, Any]) -> DcgmTest:
    results = [r for r in raw.get("results") or [] if isinstance(r, dict)]
    per_gpu: dict[str, str] = {}
    warnings: list[str] = []
    for result in results:
        gpu = result.get("entity_id", result.get("gpu_ids", result.get("gpu_id", "all")))
        per_gpu[str(gpu)] = _status(result.get("status"))
        warnings += _messages(result, "warnings")
    summary = raw.get("test_summary")
    statuses = list(per_gpu.values())
    if isinstance(summary, dict) and "status" in summary:
        statuses.append(_status(summary["status"]))
        warnings += _messages(summary, "warnings")
    for worst in ("fail", "unknown", "warn", "pass", "skip"):
        if worst in statuses:
            break
    else:
        worst = "unknown"
    return DcgmTest(str(raw.get("name") or "unnamed"), worst, per_gpu, tuple(warnings))


def run_dcgm_discovery(runner: CommandRunner, timeout: float) -> DcgmDiscovery:
    """`dcgmi discovery -l`, killed after ``timeout`` seconds. A complete GPU table is read whatever
    the exit status: dcgmi exits non-zero when a later table fails (223 with the host engine's
    NvSwitch module denylisted, KempnerInstitute/kempnerpulse#15) after printing every GPU."""
    command = " ".join(DISCOVERY_COMMAND)
    done = runner.run(list(DISCOVERY_COMMAND), timeout=timeout)
    if done.returncode == 127 and not done.stdout:
        return DcgmDiscovery(command, returncode=127, error="dcgmi is not on PATH")
    if done.returncode == 124 and not done.stdout:
        return DcgmDiscovery(command, timed_out=True, error=f"no answer within {timeout:g} s")
    gpus, note, messages, problem = parse_dcgm_discovery(done.stdout)
    if problem is not None:
        said = (done.stdout.strip() or done.stderr.strip())[-400:]
        return DcgmDiscovery(
            command, gpus, note, messages, done.returncode, error=f"{problem}: {said or 'no output'}"
        )
    return DcgmDiscovery(command, gpus, note, messages, done.returncode)


def parse_dcgm_discovery(
    text: str,
) -> tuple[tuple[DcgmGpu, ...], str | None, tuple[str, ...], str | None]:
    """(GPUs, DCGM's note, its "Error:" lines, why not) from `dcgmi discovery -l`'s table. Only rows
    after the "N GPUs found" line count (the CPU table has rows of the same shape); lines are read
    stripped, so a table quoted with an indent or trailing blanks reads the same."""
    listed: int | None = None
    in_gpus = False
    rows: list[dict[str, Any]] = []
    note = None
    messages: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        found = _FOUND.match(line)
        if found:
            in_gpus = found.group(2).startswith("GPU") and listed is None
            listed = int(found.group(1)) if in_gpus else listed
            continue
        if line.startswith("Error:"):
            messages.append(line)
            continue
        if in_gpus and line.startswith("Note:"):
            note = line
            continue
        row = _ROW.fullmatch(line)
        if not in_gpus or row is None:
            continue
        ident, info = row.group(1).strip(), row.group(2).strip()
        gpu_id = decimal(ident)
        if gpu_id is not None:
            rows.append({"gpu_id": gpu_id, "said": []})
        elif ident or not rows:
            continue  # the header row, or a row before any GPU
        field = _FIELD.fullmatch(info)
        if field is not None:
            name, value = _FIELDS[field.group(1)], field.group(2)
            rows[-1][name] = _bus_id(value) if name == "pci_bus_id" else value
        elif info:
            rows[-1]["said"].append(info)
    gpus = tuple(DcgmGpu(**{**row, "said": tuple(row["said"])}) for row in rows)
    if listed is None:
        return gpus, note, tuple(messages), "dcgmi printed no GPU list"
    if listed != len(gpus):
        return gpus, note, tuple(messages), f"dcgmi counted {listed} GPU(s) but listed {len(gpus)}"
    return gpus, note, tuple(messages), None


def _bus_id(printed: str) -> str:
    """DCGM's "00000000:4C:00.0" as NVML's probe writes it ("0000:4c:00.0"); anything else as printed."""
    match = _BUS_ID.fullmatch(printed)
    return f"{match.group(1)[-4:]}:{match.group(2)}".lower() if match else printed
