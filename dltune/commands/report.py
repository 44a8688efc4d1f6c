"""`dltune report`: many nodes' result files merged into one answer (the work is in dltune.fleet.cluster)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer

from dltune.commands.options import ALL_OPTION
from dltune.commands.output import (
    check_output_file,
    help_paragraphs,
    output_line,
    stdout_console,
    write_output,
)


@help_paragraphs
def report(
    paths: Annotated[
        list[Path], typer.Argument(help="Nodes' audit/bench JSON files, or directories of them.")
    ],
    html_file: Annotated[Path | None, typer.Option("--html", help="Write the HTML report here.")] = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="Write the merged JSON here.")] = None,
    show_all: Annotated[bool, ALL_OPTION] = False,
) -> None:
    """Merge nodes' results: a terminal summary (nodes with findings first), merged JSON, an HTML page.

    Exit 0 when every node is reachable with no fail and no error, else 1."""
    from dltune.fleet import cluster, node_files

    missing = []
    for given in paths:
        try:
            if not given.exists():
                missing.append(str(given))
        except OSError as exc:  # a name too long, a directory above that this user cannot search
            raise typer.BadParameter(f"{given}: {exc.strerror or exc}", param_hint="PATHS") from exc
    if missing:
        raise typer.BadParameter(f"{', '.join(missing)} does not exist", param_hint="PATHS")
    for path, hint in ((html_file, "--html"), (json_file, "--json")):
        if path is not None:
            check_output_file(path, hint)
    nodes = cluster.fleet_priced(node_files.load(paths))
    if not nodes:
        raise typer.BadParameter("no *.json reports found", param_hint="PATHS")
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if json_file is not None:
        write_output(json_file, cluster.merged_json(nodes, generated), "--json")
    if html_file is not None:
        write_output(html_file, cluster.render_html(nodes, generated), "--html")
    cluster.render_summary(nodes, stdout_console(), show_all=show_all)
    if html_file is not None:
        output_line(f"HTML report: {html_file.resolve()}")
    raise typer.Exit(0 if all(n.healthy for n in nodes) else 1)
