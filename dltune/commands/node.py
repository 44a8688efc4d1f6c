"""The node's audit as the commands run it: the snapshot judged and priced with the node's
acknowledgements (`audit`, `check`, `healthcheck`, `remedy`), the node's output files, and the Slurm
health check's drain policy and its application."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dltune.commands.options import HealthProfile, slurm_node_name
from dltune.commands.output import write_output
from dltune.health_state import (
    DEFAULT_RECOVERY_RUNS,
    DEFAULT_RECOVERY_WINDOW_S,
    DEFAULT_TRANSIENT_RUNS,
)
from dltune.model import DltuneError, Result
from dltune.probes.watchdog import Deadline

if TYPE_CHECKING:
    from dltune.fleet.slurm_health import Policy
    from dltune.health_state import HealthReport
    from dltune.snapshot import Snapshot

log = logging.getLogger("dltune")


def audit_results(
    root: Path,
    areas: Sequence[str] | None,
    nfs_timeout: float,
    nvml_timeout: float,
    deadline: Deadline,
    previous: Mapping[str, Mapping[str, int]] | None = None,
    dcgm_level: int | None = None,
    gpu_use: float = 1.0,
) -> tuple[Snapshot, list[Result], str]:
    """The audit itself: the node's snapshot, its judgement by every check of ``areas``, the host's name.
    NVML's child starts first, before the imports of every probe and check: its half-second clock
    window then runs while they load and read."""
    from dltune.probes.nvml import nvml_in_background

    wanted = set(areas) if areas is not None else {"gpu", "driver", "fabric"}
    nvml_future = (
        nvml_in_background(nvml_timeout, deadline)
        if str(root) == "/" and wanted & {"gpu", "driver", "fabric"}
        else None
    )
    from dltune.checks import run_checks
    from dltune.probes import collect_snapshot

    snapshot = collect_snapshot(
        root,
        areas=areas,
        nfs_timeout=nfs_timeout,
        nvml_timeout=nvml_timeout,
        deadline=deadline,
        previous=previous,
        dcgm_level=dcgm_level,
        nvml_future=nvml_future,
    )
    for path, error in snapshot.errors.items():
        log.info("probe could not read %s: %s", path, error)
    from dltune.costs.impact import Node, price

    gpus = len(snapshot.nvml.gpus) if snapshot.nvml.available else 0
    results = price(acknowledged(run_checks(snapshot, areas), root), Node(gpus=gpus, use=gpu_use))
    return snapshot, results, host_name(root)


def acknowledged(results: list[Result], root: Path) -> list[Result]:
    """The results with the node's acknowledgements (dltune.fleet.acks) applied; a file that could not be used
    is a `system.acknowledgements` warning (its findings then count in full: nothing is silenced by a
    file dltune does not trust)."""
    from dltune.fleet import acks
    from dltune.model import Status

    path = acks.DEFAULT_ACK_FILE if str(root) == "/" else str(root / acks.DEFAULT_ACK_FILE.lstrip("/"))
    found, note = acks.load(path)
    if note:
        results.append(
            Result(
                "system.acknowledgements",
                Status.WARN,
                note,
                remedy="write acknowledgements with `dltune ack` as root (it keeps the file root's, 0644)",
            )
        )
    return acks.apply(results, found)


HEALTH_TEXTFILE = "dltune-health.prom"
# A textfile of hundreds of GPUs' series is tens of kB: anything larger is not one dltune wrote.
TEXTFILE_MAX_BYTES = 4 << 20


def host_name(root: Path) -> str:
    return os.uname().nodename if str(root) == "/" else f"{os.uname().nodename}:{root}"


# Why a topology variable has nothing to say on this node (its map would be empty).
_NOTHING_FOR = {
    "dltune_health_gpu_numa_nodes": "the firmware gives the GPUs no NUMA node",
    "dltune_health_gpu_nearest_nics": "no RDMA adapter on the PCI bus is reachable from the GPUs",
}


def expectations_yaml(root: Path, host: str) -> str:
    """The topology variables as YAML for group_vars (JSON values are YAML flow values: nothing to
    escape by hand). A variable with nothing to state is a comment saying why, never an empty map
    (which, pasted over a group's, would unset what it expects); with nothing at all to emit (no GPU
    on the PCI bus, or none with a NUMA node or an adapter) a DltuneError: one line on stderr, exit 2,
    nothing on stdout to paste. The node is read, not judged: the first line says so."""
    from dltune.checks.fabric import emit_expectations
    from dltune.probes import collect_snapshot

    snapshot = collect_snapshot(root, areas=["fabric"])
    variables = emit_expectations(snapshot)
    if not any(variables.values()):
        gpus = sum(1 for device in snapshot.fabric.pci if device.kind == "gpu")
        raise DltuneError(
            "--emit-expectations: nothing to emit: "
            + (
                f"no GPU on this node's PCI bus ({root / 'sys/bus/pci/devices'})"
                if not gpus
                else f"{gpus} GPU(s) on the PCI bus, none with a NUMA node or a reachable RDMA adapter"
            )
            + "; run it on a GPU node of the model the group holds"
        )
    lines = [
        f"# dltune audit --emit-expectations on {host}: its GPU-NIC topology as read, not judged "
        "(emit from a node known to be healthy)"
    ]
    for name, values in variables.items():
        if not values:
            lines.append(f"# {name}: not emitted: {_NOTHING_FOR.get(name, 'nothing found')}")
            continue
        lines.append(f"{name}:")
        lines += [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in sorted(values.items())]
    return "\n".join(lines) + "\n"


def earlier_counters(previous: Path | None, facts_file: Path | None) -> dict[str, dict[str, int]]:
    """Counters of the previous audit: from --previous (which must be usable), else from the facts
    file this run is about to replace (where a missing or unusable one just means a first run)."""
    if previous is None and (facts_file is None or not facts_file.is_file()):
        return {}  # a first run: nothing to read
    from dltune.fleet.node_files import previous_counters

    if previous is not None:
        found, problem = previous_counters(previous)
        if problem is not None:
            raise typer.BadParameter(problem, param_hint="--previous")
        return found
    if facts_file is not None and facts_file.is_file():
        found, problem = previous_counters(facts_file)
        if problem is not None:
            log.info("not comparing with %s: %s", facts_file, problem)
        return found
    return {}


def write_node_outputs(
    results: Sequence[Result],
    host: str,
    textfile_dir: Path | None,
    facts_file: Path | None,
    roles_applied: Sequence[str] = (),
    health: HealthReport | None = None,
) -> None:
    """The Prometheus textfile and the Ansible facts file, each where asked. The health check's own
    series (``health``) go to a file of their own, HEALTH_TEXTFILE, written first: the audit timer
    writes dltune.prom too, and would otherwise wipe them at each of its runs."""
    from dltune.outputs.prometheus import render_health_textfile, render_prometheus
    from dltune.outputs.report import render_facts

    now = datetime.now(timezone.utc)
    if textfile_dir is not None:
        if health is not None:
            write_output(textfile_dir / HEALTH_TEXTFILE, render_health_textfile(health), "--textfile-dir")
        textfile = textfile_dir / "dltune.prom"
        previous = previous_success(textfile)
        write_output(textfile, render_prometheus(results, now, previous), "--textfile-dir")
    if facts_file is not None:
        write_output(facts_file, render_facts(results, host, now, roles_applied), "--facts-file")


def previous_success(textfile: Path) -> float | None:
    """The last success the textfile this run replaces recorded (none: a first run, or unreadable)."""
    from dltune.files.safeio import read_regular
    from dltune.outputs.prometheus import last_success_of

    try:
        text = read_regular(textfile, max_bytes=TEXTFILE_MAX_BYTES, follow_symlinks=False)
    except OSError:
        return None
    return last_success_of(text[:TEXTFILE_MAX_BYTES].decode("utf-8", "replace"))


def drain_policy(
    drain_limit: str,
    flap_count: int,
    flap_window_hours: float,
    profile: HealthProfile = HealthProfile.drain,
    debounce_given: Sequence[str] = (),
    recovery_runs: int = DEFAULT_RECOVERY_RUNS,
    recovery_window_minutes: float = DEFAULT_RECOVERY_WINDOW_S / 60,
) -> Policy:
    """The drain bounds from the options (exit 2 naming the option before any work)."""
    from dltune.checks import failure_classes
    from dltune.fleet.slurm_health import DrainLimit, Policy, debounce
    from dltune.health_state import Profile

    try:
        limit = DrainLimit.parse(drain_limit)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--drain-limit") from exc
    classes = failure_classes()
    class_runs = {"hard": 1, "transient": DEFAULT_TRANSIENT_RUNS}
    overrides: dict[str, int] = {}
    for given in debounce_given:
        name, _, runs = given.partition("=")
        name = name.strip()
        if not runs.strip().isdigit() or not 1 <= int(runs) <= 1000:
            raise typer.BadParameter(f"{given!a}: give NAME=N with N from 1 to 1000", param_hint="--debounce")
        if name in class_runs:
            class_runs[name] = int(runs)
        elif name in classes:
            overrides[name] = int(runs)
        else:
            raise typer.BadParameter(
                f"{name!a} is neither a class (hard, transient) nor a check id "
                "(dltune audit --all lists them)",
                param_hint="--debounce",
            )
    runs_needed, transient = debounce(classes, class_runs, overrides)
    return Policy(
        limit=limit,
        flap_count=flap_count,
        flap_window_s=flap_window_hours * 3600,
        profile=Profile(profile.value),
        runs_needed=runs_needed,
        transient=transient,
        recovery_runs=recovery_runs,
        recovery_window_s=recovery_window_minutes * 60,
    )


def apply_slurm_health(
    slurm_node: str | None, results: Sequence[Result], policy: Policy, history_file: Path
) -> tuple[str, list[Result], bool, HealthReport | None]:
    """Drain or resume this node within the bounds: (what was done, the results it adds, whether Slurm
    failed to answer, in which case nothing was changed, what the run knows for the metrics)."""
    from dltune.fleet.slurm_health import SlurmUnavailable, apply_and_report
    from dltune.probes.runner import SubprocessRunner

    node = slurm_node_name(slurm_node, environ=False)
    try:
        said, added, report = apply_and_report(node, results, SubprocessRunner(), policy, str(history_file))
    except (SlurmUnavailable, OSError, DltuneError) as exc:
        return f"nothing changed in Slurm: {exc}", [], True, None
    return said, added, False, report
