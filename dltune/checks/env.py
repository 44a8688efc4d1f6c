"""Area ``env``: the DL environment (CUBLAS_WORKSPACE_CONFIG first) is where processes get it: in the
node-wide files role dl_env wrote, and, inside a Slurm job, in the job's own environment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dltune.checks import check
from dltune.model import Result, Status, counted
from dltune.snapshot import Snapshot

CUBLAS = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_FORM = re.compile(r"^(:[1-9][0-9]*:[1-9][0-9]*)+$")


def _manifest(snap: Snapshot) -> Mapping[str, Any]:
    return snap.expected.get("dl_env", {})


def in_job(snap: Snapshot) -> bool:
    return bool(snap.environ.get("SLURM_JOB_ID"))


@check("env.cublas_workspace", needs=("manifest:dl_env",))
def cublas_workspace(snap: Snapshot) -> Result:
    manifest_value = dict(_manifest(snap).get("variables", {})).get(CUBLAS)
    if not in_job(snap):
        if manifest_value is None:
            return Result(
                "env.cublas_workspace",
                Status.WARN if not _manifest(snap) else Status.SKIP,
                "no node-wide CUBLAS_WORKSPACE_CONFIG planned (no dl_env manifest): cuBLAS is not "
                "deterministic in jobs"
                if not _manifest(snap)
                else "dl_env does not set CUBLAS_WORKSPACE_CONFIG",
                remedy="apply role dl_env" if not _manifest(snap) else None,
            )
        ok = bool(CUBLAS_FORM.match(str(manifest_value)))
        return Result(
            "env.cublas_workspace",
            Status.PASS if ok else Status.FAIL,
            f"node-wide {CUBLAS}={manifest_value}" + ("" if ok else " is malformed (:SIZE:COUNT pairs)"),
            evidence={"planned": manifest_value},
            remedy=None if ok else "set dl_env_variables.CUBLAS_WORKSPACE_CONFIG to :4096:8 and apply dl_env",
        )
    value = snap.environ.get(CUBLAS)
    evidence = {"job": snap.environ.get("SLURM_JOB_ID"), "value": value, "planned": manifest_value}
    if value is None:
        return Result(
            "env.cublas_workspace",
            Status.FAIL if manifest_value else Status.WARN,
            f"{CUBLAS} is not in this job's environment: cuBLAS results are not reproducible",
            evidence=evidence,
            remedy="apply roles dl_env and slurm_tmpdir (its TaskProlog exports /etc/dltune/job-env)",
        )
    if not CUBLAS_FORM.match(value):
        return Result(
            "env.cublas_workspace",
            Status.FAIL,
            f"{CUBLAS}={value} in this job is malformed: cuBLAS expects :SIZE:COUNT (e.g. :4096:8)",
            evidence=evidence,
            remedy=f"unset or fix {CUBLAS} where the job sets it",
        )
    if manifest_value is not None and value != manifest_value:
        return Result(
            "env.cublas_workspace",
            Status.WARN,
            f"{CUBLAS}={value} in this job, the node sets {manifest_value} (the job overrides it)",
            evidence=evidence,
        )
    return Result("env.cublas_workspace", Status.PASS, f"{CUBLAS}={value} in this job", evidence=evidence)


@check("env.node_files", needs=("manifest:dl_env",))
def node_files(snap: Snapshot) -> list[Result]:
    manifest = _manifest(snap)
    if not manifest:
        return [Result("env.node_files", Status.SKIP, "no dl_env manifest: no node-wide files to compare")]
    planned = {str(k): str(v) for k, v in dict(manifest.get("variables", {})).items()}
    results = []
    for kind, path in sorted(dict(manifest.get("files", {})).items()):
        found = snap.env_values.get(str(path))
        if found is None:
            results.append(
                Result(
                    "env.node_files",
                    Status.FAIL,
                    f"{path} is missing or unreadable",
                    subject=str(path),
                    remedy="apply role dl_env",
                )
            )
            continue
        gaps = {name: {"planned": want, "found": found.get(name)} for name, want in planned.items()}
        gaps = {name: gap for name, gap in gaps.items() if gap["found"] != gap["planned"]}
        results.append(
            Result(
                "env.node_files",
                Status.FAIL if gaps else Status.PASS,
                f"{path}: "
                + (
                    f"differs for {', '.join(sorted(gaps))}"
                    if gaps
                    else counted(len(planned), "variable") + " set"
                    if planned
                    else "the dl_env manifest plans no variable: nothing to compare"
                ),
                subject=str(path),
                evidence={"kind": kind, "differences": gaps},
                remedy="apply role dl_env" if gaps else None,
            )
        )
    return results
