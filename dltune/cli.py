"""Command line: one typer app, one module per command under dltune/commands/ (each thin glue of
probe -> check -> render, or of the staging and bench packages). Exit codes: see dltune.model."""

from __future__ import annotations

import sys

import typer

import dltune
from dltune.commands.audit import audit
from dltune.commands.bench import bench
from dltune.commands.check import check
from dltune.commands.report import report
from dltune.commands.stage import stage, stage_node
from dltune.model import EXIT_USAGE_OR_ERROR

app = typer.Typer(
    help="Audit and benchmark a deep-learning training node.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for command in (audit, check, stage, bench, report):
    app.command()(command)
app.command("stage-node", hidden=True)(stage_node)


@app.command()
def version() -> None:
    """Print dltune's version."""
    typer.echo(dltune.__version__)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(EXIT_USAGE_OR_ERROR)


if __name__ == "__main__":
    main()
