"""Command line: one typer app, one module per command under dltune/commands/ (each thin glue of
probe -> check -> render, or of the staging and bench packages). Exit codes: see dltune.model.

Every command ends through one error boundary, ``run``: a usage error, an ``OSError`` (naming its
path, or the command that is not installed), a ``DltuneError`` is one line on stderr and the
contract's exit code; any other exception is one line saying it is a dltune bug, with its traceback
only under ``dltune --debug`` or ``DLTUNE_DEBUG=1``. Never a raw traceback in a job log."""

from __future__ import annotations

import errno
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer

import dltune
from dltune.commands.options import ClickException
from dltune.commands.output import error_line, usable_columns
from dltune.model import EXIT_FAIL, EXIT_USAGE_OR_ERROR, DltuneError

DEBUG_ENV = "DLTUNE_DEBUG"
# Each command's exit code for an error that stopped it: `dltune stage` says 1 for refused or failed
# (its 2 is usage only); the judging commands say 2 for an error with no fail.
ERROR_EXIT = {"stage": EXIT_FAIL, "stage-node": EXIT_FAIL}
_settings = {"debug": False}

# The commands in the order the help lists them, each as (module, function): a module is imported only
# when its command runs (or for the whole help). The health check runs `dltune audit` on every node
# every few minutes; it should not load the fleet report, the bench or staging to do so.
COMMANDS = {
    "audit": ("dltune.commands.audit", "audit"),
    "check": ("dltune.commands.check", "check"),
    "healthcheck": ("dltune.commands.healthcheck", "healthcheck"),
    "remedy": ("dltune.commands.remedy", "remedy"),
    "ack": ("dltune.commands.ack", "ack"),
    "stage": ("dltune.commands.stage", "stage"),
    "bench": ("dltune.commands.bench", "bench"),
    "report": ("dltune.commands.report", "report"),
    "ledger": ("dltune.commands.ledger", "ledger"),
}
HIDDEN_COMMANDS = {"stage-node": ("dltune.commands.stage", "stage_node")}


def _command_function(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


def build_app(command: str | None = None) -> typer.Typer:
    """The CLI with the commands ``command`` needs: that one alone where it names one (``version``:
    none but itself), else all of them (the whole help, a misspelt name that the error should answer
    with the list)."""
    cli = typer.Typer(
        help="Audit and benchmark a deep-learning training node.",
        no_args_is_help=True,
        # --install-completion / --show-completion for bash, zsh and fish (typer's, through shellingham).
        add_completion=True,
        pretty_exceptions_enable=False,
    )
    cli.callback()(_global_options)
    named = command in COMMANDS or command in HIDDEN_COMMANDS or command == "version"
    for name, (module, function) in COMMANDS.items():
        if not named or name == command:
            cli.command(name)(_command_function(module, function))
    for name, (module, function) in HIDDEN_COMMANDS.items():
        if not named or name == command:
            cli.command(name, hidden=True)(_command_function(module, function))
    cli.command("version")(version)
    return cli


def __getattr__(name: str) -> Any:
    """``dltune.cli.app``: the whole CLI (every command), for tests and documentation tools."""
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"dltune {dltune.__version__}")
        raise typer.Exit()


def _global_options(
    debug: Annotated[
        bool,
        typer.Option("--debug", help=f"Print the traceback of an internal error (or set {DEBUG_ENV}=1)."),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print dltune's version and exit.", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    _settings["debug"] = _settings["debug"] or debug


def version() -> None:
    """Print dltune's version."""
    typer.echo(dltune.__version__)


def describe_os_error(exc: OSError) -> str:
    """An OSError as one line naming what it is about: a path (two, for a rename), or a command that is
    not installed (subprocess raises ENOENT naming the program)."""
    reason = exc.strerror or str(exc)
    name, other = exc.filename, exc.filename2
    if name is None:
        return reason
    if other is not None:
        return f"{os.fsdecode(name)} -> {os.fsdecode(other)}: {reason}"
    shown = os.fsdecode(name)
    import shutil  # only for this error's wording: not loaded on every start

    if (
        exc.errno == errno.ENOENT
        and "/" not in shown
        and not os.path.lexists(shown)
        and shutil.which(shown) is None
    ):
        return f"{shown}: no such command on PATH (or file): is it installed?"
    return f"{shown}: {reason}"


def _command_of(args: Sequence[str]) -> str | None:
    """The command asked for: the first word that is not an option (only --debug comes before it)."""
    return next((arg for arg in args if not arg.startswith("-")), None)


def _commands_needed(args: Sequence[str], command: str | None) -> str | None:
    """What ``build_app`` must load for these arguments: the eager options before the command act
    first (`dltune --help audit` lists every command; `dltune --version` needs none)."""
    before = args[: args.index(command)] if command is not None else args
    if "--help" in before:
        return None
    if "--version" in before:
        return "version"
    return command


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default: this process's arguments) and return its exit code; every
    error ends here as one line on stderr (see the module)."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(args)
    who = f"dltune {command}" if command else "dltune"
    code = ERROR_EXIT.get(command or "", EXIT_USAGE_OR_ERROR)
    _settings["debug"] = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    if os.environ.get("COLUMNS") is not None and usable_columns() is None:
        del os.environ["COLUMNS"]  # no width ("0", text, "²"): rich would print at 0 columns or fail
    try:
        result = build_app(_commands_needed(args, command))(
            args=args, prog_name="dltune", standalone_mode=False
        )
    except ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # click 8.2+: typer has printed the help already
            return exc.exit_code
        ctx = getattr(exc, "ctx", None)
        error_line(f"{ctx.command_path if ctx is not None else who}: {exc.format_message()}")
        return exc.exit_code
    except typer.Abort:
        error_line(f"{who}: aborted")
        return code
    except KeyboardInterrupt:
        return EXIT_USAGE_OR_ERROR
    except DltuneError as exc:
        _traceback_if_debug()
        error_line(f"{who}: {exc}")
        return code
    except OSError as exc:
        if exc.errno == errno.EPIPE:  # the reader of stdout went away (`| head`): nothing to say
            _silence_stdout()
            return EXIT_FAIL
        _traceback_if_debug()
        error_line(f"{who}: {describe_os_error(exc)}")
        return code
    except Exception as exc:  # the boundary: whatever escaped is a bug, said in one line
        _traceback_if_debug()
        error_line(
            f"{who}: internal error (a dltune bug, please report it): {type(exc).__name__}: {exc}"
            + (
                ""
                if _settings["debug"]
                else f" (rerun with {DEBUG_ENV}=1 or `dltune --debug` for the traceback)"
            )
        )
        return code
    return result if isinstance(result, int) else 0


def _traceback_if_debug() -> None:
    if _settings["debug"]:
        import traceback

        traceback.print_exc()


def _silence_stdout() -> None:
    """After EPIPE: point stdout at /dev/null, so the interpreter's last flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main() -> None:
    try:
        code = run()
    except KeyboardInterrupt:
        code = EXIT_USAGE_OR_ERROR
    sys.exit(code)


if __name__ == "__main__":
    main()
