"""Command line: thin glue of probe -> check -> render. Exit codes: see dltune.model."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from dltune import __version__
from dltune.checks import run_checks
from dltune.model import AREAS, EXIT_USAGE_OR_ERROR, exit_code
from dltune.probes import collect_snapshot
from dltune.probes.storage import fstype_of
from dltune.probes.watchdog import Deadline
from dltune.report import (
    console,
    render_facts,
    render_human,
    render_json,
    render_prometheus,
    write_atomically,
)
from dltune.text import visible

app = typer.Typer(
    help="Audit and benchmark a deep-learning training node.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
log = logging.getLogger("dltune")


class OutputFormat(str, Enum):
    human = "human"
    json = "json"
    prometheus = "prometheus"


def _parse_areas(only: str | None) -> list[str] | None:
    if only is None:
        return None
    areas = [a.strip() for a in only.split(",") if a.strip()]
    unknown = [a for a in areas if a not in AREAS]
    if unknown or not areas:
        raise typer.BadParameter(
            f"unknown area(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(AREAS)}",
            param_hint="--only",
        )
    return areas


EXIT_INTERRUPTED = 130


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def check_output_file(path: Path, hint: str) -> None:
    """An output path that cannot be written is a usage error before any work (exit 2), not a traceback
    after it."""
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a directory: give a file", param_hint=hint)
    parent = path.parent
    if not parent.is_dir():
        raise typer.BadParameter(f"{parent} is not a directory", param_hint=hint)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise typer.BadParameter(f"{parent} is not writable by this user", param_hint=hint)


def write_output(path: Path, text: str, hint: str) -> None:
    try:
        write_atomically(path, text)
    except OSError as exc:  # e.g. the disk filled up since the check
        console(stderr=True).print(f"dltune: {hint} {visible(str(path))}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_USAGE_OR_ERROR) from exc


@app.command()
def audit(
    root: Annotated[
        Path, typer.Option("--root", help="Read the host's files under this directory (a fixture tree).")
    ] = Path("/"),
    output: Annotated[OutputFormat, typer.Option("--format", help="Output format on stdout.")] = (
        OutputFormat.human
    ),
    only: Annotated[
        str | None, typer.Option("--only", help=f"Comma-separated areas: {','.join(AREAS)}.")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log probe details on stderr.")] = False,
    textfile_dir: Annotated[
        Path | None,
        typer.Option(
            "--textfile-dir", help="Also write dltune.prom there (node_exporter textfile collector)."
        ),
    ] = None,
    facts_file: Annotated[
        Path | None,
        typer.Option(
            "--facts-file", help="Also write Ansible local facts (e.g. /etc/ansible/facts.d/dltune.fact)."
        ),
    ] = None,
    nfs_timeout: Annotated[
        float,
        typer.Option(
            "--nfs-timeout", help="Seconds an NFS mount may take to answer before it counts as stale."
        ),
    ] = 5.0,
    slurm_drain: Annotated[
        bool,
        typer.Option(
            "--slurm-drain",
            help="Drain this Slurm node on a critical fail; resume it when healthy (only dltune's drain).",
        ),
    ] = False,
    slurm_node: Annotated[
        str | None, typer.Option("--slurm-node", help="Slurm node name (default: the short hostname).")
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            help="Seconds for the whole audit (well under Slurm's 60 s HealthCheckProgram limit): on expiry "
            "the results so far are printed with system.audit_timeout naming what did not finish.",
        ),
    ] = 30.0,
    nvml_timeout: Annotated[
        float,
        typer.Option("--nvml-timeout", help="Seconds NVML may take before the driver counts as hung."),
    ] = 10.0,
) -> None:
    """Read-only audit of this node against what the roles applied. Exit 0 ok, 1 fail, 2 usage/error."""
    deadline = Deadline(timeout)
    # A short-lived process that builds 100,000s of small objects on a host with many mounts and frees
    # them all at exit: the cyclic collector would only rescan them (a fifth of the run's time).
    gc.disable()
    try:
        logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr)
        areas = _parse_areas(only)
        if not root.is_dir():
            raise typer.BadParameter(f"{root} is not a directory", param_hint="--root")
        if textfile_dir is not None:
            check_output_file(textfile_dir / "dltune.prom", "--textfile-dir")
        if facts_file is not None:
            check_output_file(facts_file, "--facts-file")
        for value, hint in (
            (nfs_timeout, "--nfs-timeout"),
            (timeout, "--timeout"),
            (nvml_timeout, "--nvml-timeout"),
        ):
            if not value > 0:
                raise typer.BadParameter(f"{value} must be a positive number of seconds", param_hint=hint)
        snapshot = collect_snapshot(
            root, areas=areas, nfs_timeout=nfs_timeout, nvml_timeout=nvml_timeout, deadline=deadline
        )
        for path, error in snapshot.errors.items():
            log.info("probe could not read %s: %s", path, error)
        results = run_checks(snapshot, areas)
        host = socket.gethostname() if str(root) == "/" else f"{socket.gethostname()}:{root}"
        now = datetime.now(timezone.utc)
        # Writing files is explicit (root-run timers and hooks ask for it); the audit itself writes nothing.
        if textfile_dir is not None:
            write_output(textfile_dir / "dltune.prom", render_prometheus(results, now), "--textfile-dir")
        if facts_file is not None:
            write_output(facts_file, render_facts(results, host, now), "--facts-file")
        if slurm_drain:
            from dltune.probes.runner import SubprocessRunner
            from dltune.slurm_health import apply as apply_slurm_health

            node = slurm_node or socket.gethostname().split(".")[0]
            try:
                console(stderr=True).print(
                    f"dltune audit --slurm-drain: {apply_slurm_health(node, results, SubprocessRunner())}"
                )
            except RuntimeError as exc:
                console(stderr=True).print(f"dltune audit --slurm-drain: {exc}")
                raise typer.Exit(EXIT_USAGE_OR_ERROR) from exc
        if output is OutputFormat.json:
            sys.stdout.write(render_json(results, host, now))
        elif output is OutputFormat.prometheus:
            sys.stdout.write(render_prometheus(results, now))
        else:
            # Piped into a log (Ansible, Slurm), a terminal's 80 columns would fold every summary.
            render_human(results, console(width=None if sys.stdout.isatty() else 160), host)
        raise typer.Exit(exit_code(results))

    finally:
        gc.enable()  # for callers in the same process (tests)


def _plan_advice(src: Path) -> list[str]:
    from dltune import stage as stage_mod  # not imported by the audit: it runs on every node, often

    entries = [e for e in stage_mod.scan_tree(src) if e.kind == "file"] if src.is_dir() else []
    size = sum(e.size for e in entries) if src.is_dir() else src.stat().st_size
    count = len(entries) if src.is_dir() else 1
    mean = size / count if count else 0
    lines = [f"{src}: {size / 1e9:.2f} GB in {count} file(s), mean {mean / 1e3:.1f} kB, on {fstype_of(src)}"]
    if src.is_dir() and count > 10_000 and mean < 1_000_000:
        lines.append(
            "pack: many small files; keep them as one archive (tar or tar.zst) on the shared filesystem"
            " and stage the archive: each node then extracts it once instead of opening every file over NFS"
        )
    if size <= 10e9:
        lines.append("memory: up to ~10 GB fits in RAM; stage it (or load it into memory) at job start")
    elif size <= 100e9:
        lines.append("stage: copy it to $SLURM_TMPDIR at job start (`dltune stage SRC`)")
    else:
        lines.append("shared: over ~100 GB, read it from the shared filesystem (spread over the VIP mounts)")
    return lines


@app.command()
def stage(
    src: Annotated[
        Path,
        typer.Argument(help="Dataset directory, a tar archive (tar, tar.gz/bz2/xz/zst), or one file."),
    ],
    to: Annotated[
        Path | None,
        typer.Option("--to", help="Destination directory (default: $SLURM_TMPDIR).", envvar="SLURM_TMPDIR"),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", help="Parallel copy streams.", min=1, max=256)] = min(
        16, 4 * (os.cpu_count() or 1)
    ),
    verify: Annotated[
        bool, typer.Option("--verify", help="Compare sizes with the source after copying.")
    ] = False,
    checksum: Annotated[bool, typer.Option("--checksum", help="With --verify, compare SHA-256 too.")] = False,
    plan: Annotated[bool, typer.Option("--plan", help="Only advise: memory, stage, shared or pack.")] = False,
    replace: Annotated[
        bool,
        typer.Option("--replace", help="Replace DIR/<name> when it holds another source, or an older state."),
    ] = False,
) -> None:
    """Copy SRC to DIR/<name> on node-local disk: parallel, resumable, atomic. Prints the staged path.
    Exit 0 staged, 1 refused or failed, 2 usage, 130 interrupted (the partial copy resumes)."""
    from dltune import stage as stage_mod

    if not src.exists():
        raise typer.BadParameter(f"{src} does not exist", param_hint="SRC")
    if plan:
        for line in _plan_advice(src):
            typer.echo(line)
        return
    if to is None:
        raise typer.BadParameter(
            "give --to DIR (or run inside a Slurm job with $SLURM_TMPDIR)", param_hint="--to"
        )
    err = console(stderr=True, soft_wrap=True)  # messages whole in job logs, not folded at 80
    with Progress(
        TextColumn("staging {task.description}", markup=False),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(visible(src.name), total=None)
        # SIGTERM (Slurm's scancel, a job's time limit) ends the copy as Ctrl-C does: cleanly, resumable.
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            summary = stage_mod.stage(
                src,
                to,
                workers=workers,
                verify=verify,
                checksum=checksum,
                replace=replace,
                progress=lambda n: bar.advance(task, n),
                on_total=lambda total: bar.update(task, total=total or None),
            )
        except stage_mod.StageError as exc:
            err.print(f"dltune stage: {visible(str(exc))}")
            raise typer.Exit(1) from exc
        except KeyboardInterrupt as exc:
            err.print(
                f"dltune stage: interrupted; the partial copy in {visible(str(to))} is kept and is not "
                "taken as staged: run the same command again to resume"
            )
            raise typer.Exit(EXIT_INTERRUPTED) from exc
        finally:
            signal.signal(signal.SIGTERM, previous)
    err.print(
        f"staged {visible(str(summary.path))}: {summary.files} files, {summary.bytes / 1e6:.1f} MB copied"
        f" ({summary.skipped} already there) in {summary.seconds:.1f}s, {summary.mb_per_s:.0f} MB/s"
        + (", verified" if summary.verified else "")
        + (f" ({'; '.join(summary.notes)})" if summary.notes else "")
    )
    # The path exactly, as bytes: scripts take it as is (DATA=$(dltune stage ...)).
    sys.stdout.flush()
    sys.stdout.buffer.write(os.fsencode(summary.path) + b"\n")
    sys.stdout.buffer.flush()


class BenchFormat(str, Enum):
    human = "human"
    json = "json"


@app.command()
def bench(
    device: Annotated[
        str | None, typer.Option("--device", help="cpu or cuda (default: every local GPU, else the CPU).")
    ] = None,
    gpus: Annotated[
        str | None, typer.Option("--gpus", help="Comma-separated GPU indices (default: all).")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes: an answer in about a minute.")] = False,
    data: Annotated[
        Path | None,
        typer.Option("--data", help="ImageFolder directory or tar of one (default: generated sample JPEGs)."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="torchvision model (resnet50; resnet18 on CPU).")
    ] = None,
    batch: Annotated[int | None, typer.Option("--batch", min=1, help="Batch size per device.")] = None,
    steps: Annotated[int | None, typer.Option("--steps", min=1, help="Measured training steps.")] = None,
    image_size: Annotated[
        int | None, typer.Option("--image-size", min=8, help="Image side in pixels.")
    ] = None,
    dataloader_sweep: Annotated[
        bool, typer.Option("--dataloader-sweep/--no-dataloader-sweep", help="Sweep DataLoader settings.")
    ] = True,
    determinism: Annotated[
        bool, typer.Option("--determinism/--no-determinism", help="Check bitwise-reproducible training.")
    ] = True,
    data_parallel: Annotated[
        bool, typer.Option("--data-parallel/--no-data-parallel", help="torchrun over all devices.")
    ] = True,
    compile_step: Annotated[bool, typer.Option("--compile", help="Also measure torch.compile.")] = False,
    multi_node: Annotated[
        bool,
        typer.Option(
            "--multi-node",
            help="Only data-parallel training across the nodes of this Slurm job step "
            "(srun --nodes=N --ntasks-per-node=1); the first node prints the results.",
        ),
    ] = False,
    output: Annotated[
        BenchFormat, typer.Option("--format", help="Output format on stdout.")
    ] = BenchFormat.human,
) -> None:
    """Short benchmark of this node's GPUs (or CPU): matmul and memory vs spec, training throughput,
    input-pipeline gap, determinism, data-parallel. Exit 0 ok, 1 a fail, 2 usage/error."""
    from dltune.bench.measure import BenchError
    from dltune.bench.run import Options, run_bench, run_multi_node

    if device not in (None, "cpu", "cuda"):
        raise typer.BadParameter(f"{device}: give cpu or cuda", param_hint="--device")
    try:
        gpu_list = [int(g) for g in gpus.split(",") if g.strip()] if gpus else None
    except ValueError as exc:
        raise typer.BadParameter(f"{gpus}: give GPU indices such as 0,1", param_hint="--gpus") from exc
    if data is not None and not data.exists():
        raise typer.BadParameter(f"{data} does not exist", param_hint="--data")
    options = Options(
        device=device,
        gpus=gpu_list,
        quick=quick,
        data=data,
        model=model,
        batch=batch,
        steps=steps,
        image_size=image_size,
        dataloader_sweep=dataloader_sweep,
        determinism=determinism,
        data_parallel=data_parallel,
        compile=compile_step,
    )
    err = console(stderr=True, soft_wrap=True)  # messages whole in job logs, not folded at 80
    start = datetime.now(timezone.utc)
    with Progress(
        TextColumn("bench: {task.description}", markup=False), BarColumn(), console=err, transient=True
    ) as bar:
        task = bar.add_task("starting", total=None)
        try:
            if multi_node:
                found = run_multi_node(options, lambda name: bar.update(task, description=name))
            else:
                found = run_bench(options, lambda name: bar.update(task, description=name))
        except BenchError as exc:
            err.print(f"dltune bench: {exc}")
            raise typer.Exit(EXIT_USAGE_OR_ERROR) from exc
    if found is None:  # another node of a multi-node run: the first node reports for all
        err.print(f"dltune bench: {socket.gethostname()} took part; the step's first node reports")
        raise typer.Exit(0)
    results = found
    now = datetime.now(timezone.utc)
    err.print(f"dltune bench: {len(results)} results in {(now - start).total_seconds():.1f}s")
    host = socket.gethostname()
    if output is BenchFormat.json:
        sys.stdout.write(render_json(results, host, now))
    else:
        render_human(results, console(width=None if sys.stdout.isatty() else 160), host, what="bench")
    raise typer.Exit(exit_code(results))


@app.command()
def report(
    paths: Annotated[
        list[Path], typer.Argument(help="Nodes' audit/bench JSON files, or directories of them.")
    ],
    html_file: Annotated[Path | None, typer.Option("--html", help="Write the HTML report here.")] = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="Write the merged JSON here.")] = None,
) -> None:
    """Merge nodes' results: terminal summary (nodes x areas), merged JSON, HTML page.
    Exit 0 when every node is reachable with no fail and no error, else 1."""
    from dltune import cluster

    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise typer.BadParameter(f"{', '.join(missing)} does not exist", param_hint="PATHS")
    for path, hint in ((html_file, "--html"), (json_file, "--json")):
        if path is not None:
            check_output_file(path, hint)
    nodes = cluster.load(paths)
    if not nodes:
        raise typer.BadParameter("no *.json reports found", param_hint="PATHS")
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if json_file is not None:
        write_output(json_file, cluster.merged_json(nodes, generated), "--json")
    if html_file is not None:
        write_output(html_file, cluster.render_html(nodes, generated), "--html")
    cluster.render_summary(nodes, console(width=None if sys.stdout.isatty() else 160))
    if html_file is not None:
        typer.echo(f"HTML report: {html_file.resolve()}")
    raise typer.Exit(0 if all(n.healthy for n in nodes) else 1)


@app.command()
def version() -> None:
    """Print dltune's version."""
    typer.echo(__version__)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(EXIT_USAGE_OR_ERROR)


if __name__ == "__main__":
    main()
