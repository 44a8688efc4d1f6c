"""`dltune ledger`: measure what a role changes on this node, before and after it runs (the tuning
ledger, dltune.costs.ledger). dltune.cluster.site runs it as root with `dltune_ledger: true`."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer

from dltune.commands.output import error_line, help_paragraphs, progress_console, stdout_console
from dltune.model import EXIT_USAGE_OR_ERROR
from dltune.snapshot import MANIFEST_DIR

DEFAULT_LEDGER_DIR = f"{MANIFEST_DIR}/ledger"
MAX_LEDGER_BYTES = 1 << 20


def _measure(role: str, data: list[Path]) -> dict[str, dict[str, object]]:
    """Each measure of ``role`` as this node is now: what -> {kind, unit, median, mad, rates} or {why}."""
    from dltune.bench import io_cost
    from dltune.costs.ledger import ROLE_MEASURES, summarise
    from dltune.probes.hostfs import HostFS

    if role == "nvidia_driver":
        rounds = _gpu_rounds()
        kind = ROLE_MEASURES[role]
        summary = (
            {"kind": kind, "unit": "TFLOPS"} | summarise(rounds)
            if isinstance(rounds, list)
            else {"why": rounds}
        )
        return {"GPU matmul cuda:0": summary}
    targets = [(f"scratch files in {Path('/tmp')}", Path("/tmp"))] if role == "tmpfs_tmp" else []
    targets += [(f"small-file reads {path}", path) for path in data] if role == "data_disks" else []
    measured: dict[str, dict[str, object]] = {}
    for what, where in targets:
        progress_console().print(f"dltune ledger: {role}: {what}")
        if role == "data_disks" and not where.is_dir():
            measured[what] = {"why": f"{where} does not exist yet"}
            continue
        files = (
            io_cost.scratch_rounds(
                where, _tmpfs_reference(HostFS("/").read_stripped("/proc/self/mountinfo") or "")
            )
            if role == "tmpfs_tmp"
            else io_cost.read_rounds(where)
        )
        kind = ROLE_MEASURES[role]
        measured[what] = (
            {"why": files}
            if isinstance(files, str)
            else {"kind": kind, "unit": "files/s"}
            | summarise(files.rates, files.reference, files.reference_is)
        )
    return measured


def _tmpfs_reference(mountinfo: str) -> Path | None:
    """/dev/shm where this mount table (/proc/self/mountinfo) has a tmpfs there (the reference of
    /tmp's scratch work), else None."""
    from dltune.probes.mounts import parse_mountinfo
    from dltune.snapshot import mount_at

    shm = mount_at(parse_mountinfo(mountinfo), "/dev/shm")
    return Path("/dev/shm") if shm is not None and shm.fstype == "tmpfs" else None


def _gpu_rounds(rounds: int = 7) -> list[float] | str:
    """The GPU smoke: the first GPU's bf16 (fp16 before Ampere) matmul burst, TFLOPS each round; or why
    there is none (no PyTorch beside dltune, no GPU answering CUDA: a node before its driver)."""
    try:
        import torch
    except ImportError:
        return "no PyTorch beside dltune (role dltune: dltune_bench_python or dltune_bench_torch_packages)"
    try:
        if not torch.cuda.is_available():
            return "no GPU answers CUDA (no driver yet, or none that this PyTorch supports)"
        from dltune.bench import measure

        dtype = measure.matmul_dtypes(torch, "cuda:0")[0]
        return [measure.matmul(torch, "cuda:0", dtype, 8192, 0.1).tflops for _ in range(rounds)]
    except RuntimeError as exc:  # a CUDA error: the GPU does not compute now
        return f"the GPU smoke failed: {exc}"


def _read(path: Path) -> dict[str, object] | None:
    from dltune.files import safeio

    try:
        data = safeio.load_file(path, MAX_LEDGER_BYTES)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        error_line(
            f"dltune ledger: {path} cannot be used ({exc}): measuring as if nothing was measured before"
        )
        return None
    return data if isinstance(data, dict) else None


def _record_after(role: str, measured: dict[str, dict[str, object]], directory: Path, now: str) -> None:
    """The after phase: each measure against the before phase's, the entry written, the pending gone."""
    from dltune.costs.ledger import LEDGER_SCHEMA_VERSION, compare, said
    from dltune.files import dirfd

    pending = directory / f"{role}.before.json"
    before = _read(pending) or {}
    earlier = before.get("measures") if isinstance(before.get("measures"), dict) else {}
    changes, not_measured = [], {}
    for what, after in measured.items():
        if "why" in after:
            not_measured[what] = str(after["why"])
            stdout_console().print(f"{role}: {what}: not measured: {after['why']}")
            continue
        then = earlier.get(what) if isinstance(earlier, dict) else None
        usable = then if isinstance(then, dict) and "median" in then and "mad" in then else None
        changes.append(compare(what, str(after["kind"]), str(after["unit"]), usable, after))
    entry = {"schema": LEDGER_SCHEMA_VERSION, "role": role, "before_time": before.get("time"),
             "after_time": now, "changes": changes, "not_measured": not_measured}  # fmt: skip
    dirfd.write_atomically(str(directory / f"{role}.json"), json.dumps(entry, indent=1) + "\n")
    pending.unlink(missing_ok=True)
    for change in changes:
        stdout_console().print(f"{role}: {said(change)}")


@help_paragraphs
def ledger(
    phase: Annotated[
        str, typer.Option("--phase", help="before: measure and keep; after: measure and compare.")
    ],
    roles: Annotated[
        list[str],
        typer.Option(
            "--role", help="A role whose effect to measure: data_disks, tmpfs_tmp, nvidia_driver. Repeat it."
        ),
    ],
    data: Annotated[
        list[Path] | None, typer.Option("--data", help="data_disks: a data disk's mount point. Repeat it.")
    ] = None,
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the ledger is kept (beside the roles' manifests).")
    ] = Path(DEFAULT_LEDGER_DIR),
) -> None:
    """Measure what a role changes on this node: before it runs, and again after it ran.

    --phase before measures each --role and keeps it; --phase after measures again and writes
    DIR/ROLE.json (DIR: --dir) with each measure's change, a change within the noise said so. The audit
    reports it as system.tuning_ledger; `dltune report` adds up the fleet."""
    from dltune.costs.ledger import LEDGER_SCHEMA_VERSION, ROLE_MEASURES
    from dltune.files import dirfd

    if phase not in ("before", "after"):
        raise typer.BadParameter(f"{phase}: give before or after", param_hint="--phase")
    unknown = [r for r in roles if r not in ROLE_MEASURES]
    if unknown:
        raise typer.BadParameter(
            f"{', '.join(unknown)}: give one of {', '.join(ROLE_MEASURES)}", param_hint="--role"
        )
    paths = [Path(os.path.normpath(p)) for p in data or []]
    if "data_disks" in roles and not paths:
        raise typer.BadParameter(
            "--role data_disks needs its mount points (--data /data)", param_hint="--data"
        )
    if any(not p.is_absolute() for p in paths):
        raise typer.BadParameter("give absolute mount points", param_hint="--data")
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    try:
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        for role in roles:
            measured = _measure(role, paths)
            pending = directory / f"{role}.before.json"
            if phase == "before":
                record = {"schema": LEDGER_SCHEMA_VERSION, "role": role, "time": now, "measures": measured}
                dirfd.write_atomically(str(pending), json.dumps(record, indent=1) + "\n")
                continue
            _record_after(role, measured, directory, now)
    except (OSError, dirfd.UnsafeEntry) as exc:
        error_line(f"dltune ledger: {directory}: {getattr(exc, 'strerror', None) or exc}")
        raise typer.Exit(EXIT_USAGE_OR_ERROR) from exc
