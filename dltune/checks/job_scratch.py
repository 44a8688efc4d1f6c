"""Area ``staging``, the job's scratch (not `dltune stage` itself, whose rules live in
dltune/staging/): inside a Slurm job, $SLURM_TMPDIR is the job's own private directory on local disk
with room to stage into; on any node, slurm.conf runs the slurm_tmpdir hooks as applied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dltune.checks import check
from dltune.checks.env import in_job
from dltune.model import Result, Status
from dltune.snapshot import Snapshot

# Not node-local: staging there is no faster than reading the shared storage.
REMOTE_FSTYPES = frozenset(
    {"nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "ceph", "glusterfs", "9p", "virtiofs"}
)
# Below this (GB), the scratch directory warns: staging anything but a small dataset would not fit.
# The role's slurm_tmpdir_min_free_gb, recorded in its manifest fragment, overrides it.
DEFAULT_MIN_FREE_GB = 10


def _manifest(snap: Snapshot) -> Mapping[str, Any]:
    return snap.expected.get("slurm_tmpdir", {})


def is_remote(fstype: str) -> bool:
    return fstype in REMOTE_FSTYPES or fstype.startswith("fuse.")


# long: one verdict per way the job directory can be wrong, judged in this order
@check("staging.slurm_tmpdir", needs=("manifest:slurm_tmpdir",))
def slurm_tmpdir(snap: Snapshot) -> Result:
    if not in_job(snap):
        return Result("staging.slurm_tmpdir", Status.SKIP, "not inside a Slurm job (SLURM_JOB_ID unset)")
    path = snap.environ.get("SLURM_TMPDIR")
    remedy = "apply role slurm_tmpdir (its Prolog creates the directory, its TaskProlog exports it)"
    if not path:
        return Result(
            "staging.slurm_tmpdir", Status.FAIL, "SLURM_TMPDIR is not set in this job", remedy=remedy
        )
    info = snap.paths.get(path)
    if info is None or not info.exists:
        return Result(
            "staging.slurm_tmpdir",
            Status.FAIL,
            f"SLURM_TMPDIR={path} does not exist",
            subject=path,
            remedy=remedy,
        )
    if info.statfs_error:
        return Result(
            "staging.slurm_tmpdir",
            Status.FAIL,
            f"SLURM_TMPDIR={path}: {info.statfs_error}",
            subject=path,
            evidence={"fstype": info.fstype, "statfs": info.statfs_error},
            remedy="the filesystem under $SLURM_TMPDIR does not answer (a dead network mount?): drain the "
            "node; slurm_tmpdir_base belongs on node-local disk",
            critical=True,
        )
    evidence = {
        "link": info.is_link,
        "directory": info.is_dir,
        "uid": info.uid,
        "audit_uid": snap.uid,
        "mode": oct(info.mode) if info.mode is not None else None,
        "fstype": info.fstype,
        "free_bytes": info.free_bytes,
    }
    problems = []
    if info.is_link or not info.is_dir:
        problems.append("not a real directory")
    if info.uid != snap.uid:
        problems.append(f"owned by uid {info.uid}, not by this job's user ({snap.uid})")
    if info.mode != 0o700:
        problems.append(f"mode {oct(info.mode or 0)}, not 0700")
    if is_remote(info.fstype):
        problems.append(f"on {info.fstype}, not on node-local disk")
    metrics = {"free_bytes": float(info.free_bytes)} if info.free_bytes is not None else {}
    if problems:
        return Result(
            "staging.slurm_tmpdir",
            Status.FAIL,
            f"SLURM_TMPDIR={path}: " + "; ".join(problems),
            subject=path,
            evidence=evidence,
            remedy=remedy,
            metrics=metrics,
            critical=True,
        )
    free_gb = (info.free_bytes or 0) / 1e9
    min_free_gb = _manifest(snap).get("min_free_gb", DEFAULT_MIN_FREE_GB)
    evidence["min_free_gb"] = min_free_gb
    low = info.free_bytes is not None and info.free_bytes < min_free_gb * 1e9
    return Result(
        "staging.slurm_tmpdir",
        Status.WARN if low else Status.PASS,
        f"SLURM_TMPDIR={path}: private (0700), on local {info.fstype}, {free_gb:.1f} GB free"
        + (f" (below {min_free_gb:g} GB: little room to stage a dataset)" if low else ""),
        subject=path,
        evidence=evidence,
        remedy="free the node's local disk (another job may have filled it)" if low else None,
        metrics=metrics,
    )


# slurm.conf(5): Alloc, and each flag that "implicitly sets the Alloc flag" (Contain, DeferBatch,
# NoHold, ForceRequeueOnFail, RunInJob, X11).
PROLOG_FLAGS_AT_ALLOCATION = frozenset(
    {"alloc", "contain", "deferbatch", "forcerequeueonfail", "nohold", "runinjob", "x11"}
)


def prolog_runs_at_allocation(prolog_flags: str) -> bool:
    """PrologFlags that make the Prolog run when the job is allocated, so salloc sessions get their
    directory too. Role slurm_tmpdir's module decides the same (tests/unit/test_slurm_conf_parity.py
    feeds both the same real slurm.conf files)."""
    return bool({flag.strip().lower() for flag in prolog_flags.split(",")} & PROLOG_FLAGS_AT_ALLOCATION)


@check("staging.slurm_hooks", needs=("manifest:slurm_tmpdir",))
def slurm_hooks(snap: Snapshot) -> Result:
    manifest = _manifest(snap)
    if not manifest:
        return Result("staging.slurm_hooks", Status.SKIP, "no slurm_tmpdir manifest on this node")
    problems: list[str] = []
    hooks = {str(k): str(v) for k, v in dict(manifest.get("hooks", {})).items()}
    conf_path = str(manifest.get("conf", ""))
    conf_values: dict[str, str] = {}
    if manifest.get("manage_conf", True):
        parsed = snap.slurm_conf.get(conf_path)
        if parsed is None:
            problems.append(f"{conf_path} is missing or unreadable")
        else:
            conf_values = dict(parsed)
            for hook, key in (("prolog", "prolog"), ("epilog", "epilog"), ("task_prolog", "taskprolog")):
                if conf_values.get(key) != hooks.get(hook):
                    problems.append(f"{key}={conf_values.get(key)} in slurm.conf, planned {hooks.get(hook)}")
            if not prolog_runs_at_allocation(conf_values.get("prologflags", "")):
                problems.append("PrologFlags lacks Alloc: salloc sessions get no directory")
    for hook, path in sorted(hooks.items()):
        info = snap.paths.get(path)
        if info is None or not info.exists or not info.is_file:
            problems.append(f"{hook} program {path} is missing")
        elif info.uid != 0 or info.writable_by_others:
            problems.append(f"{hook} program {path} is not root-owned or is writable by others")
    base = str(manifest.get("base", ""))
    info = snap.paths.get(base)
    if info is None or not info.exists or info.is_link or not info.is_dir:
        problems.append(f"scratch base {base} is missing or not a real directory")
    else:
        if info.uid != 0 or info.writable_by_others:
            problems.append(f"scratch base {base} is not root-owned 0755 (users could plant entries)")
        if is_remote(info.fstype):
            problems.append(f"scratch base {base} is on {info.fstype}, not node-local")
    return Result(
        "staging.slurm_hooks",
        Status.FAIL if problems else Status.PASS,
        "; ".join(problems) if problems else f"Prolog/TaskProlog/Epilog manage {base}/<user>.<jobid>",
        evidence={"conf": conf_path, "slurm_conf": conf_values, "hooks": hooks, "base": base},
        remedy="apply role slurm_tmpdir" if problems else None,
        # Jobs on this node would get no (or an unsafe) $SLURM_TMPDIR: a reason to drain it.
        critical=bool(problems),
    )
