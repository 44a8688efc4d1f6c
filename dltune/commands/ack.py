"""`dltune ack`: an operator accepts a finding on this node for a while (dltune.fleet.acks): while it
lasts the finding reads `warn`, is not critical (no drain, no alert) and says who accepted it, why and
until when. Run as root on the node (playbooks/ack.yml runs it on the nodes named); `--list` as anyone."""

from __future__ import annotations

import json
import os
import pwd
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from dltune.commands.output import help_paragraphs, output_line
from dltune.model import EXIT_OK, InputError

ACK_FILE_OPTION = typer.Option("--ack-file", help="Where this node's acknowledgements are kept (root's).")


def operator_name() -> str:
    """Who runs it: the user sudo was run by, else this process's user."""
    by_sudo = os.environ.get("SUDO_USER")
    if by_sudo:
        return by_sudo
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"


# long: mostly its option declarations
@help_paragraphs
def ack(
    check: Annotated[
        str | None, typer.Argument(help="The check whose finding is accepted (gpu.ecc, fabric.ib_ports...).")
    ] = None,
    subject: Annotated[
        str | None,
        typer.Option(
            "--subject", help="Only this subject of the check (a GPU '2:GPU-...', a port, a mount)."
        ),
    ] = None,
    why: Annotated[
        str | None, typer.Option("--why", help="Why it is accepted (an RMA number, a policy).")
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until", help="When it ends: 12h, 7d, 2w, or a UTC date 2026-12-24[T18:00] (90 days at most)."
        ),
    ] = None,
    by: Annotated[str | None, typer.Option("--by", help="Who accepts it (default: the sudo user).")] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="End the acknowledgements of CHECK (--subject) now.")
    ] = False,
    show: Annotated[
        bool, typer.Option("--list", help="Print the acknowledgements in force (JSON lines).")
    ] = False,
    ack_file: Annotated[Path | None, ACK_FILE_OPTION] = None,
) -> None:
    """Acknowledge a known finding on this node until a date: no drain, no alert, shown as acknowledged.

    For example `dltune ack gpu.ecc --subject 2:GPU-... --why "RMA 4711" --until 14d`. `dltune ack
    --list` prints those in force; `dltune ack gpu.ecc --clear` ends them."""
    from dltune.checks import registered
    from dltune.fleet import acks

    path = str(ack_file) if ack_file is not None else acks.DEFAULT_ACK_FILE
    now = time.time()
    found, note = acks.load(path)
    if note:
        raise InputError(f"--ack-file: {note}")
    if show:
        for item in found:
            if item.until > now:
                sys.stdout.write(json.dumps({**item.to_json(), **item.shown()}) + "\n")
        raise typer.Exit(EXIT_OK)
    if check is None:
        raise InputError("CHECK is missing: name the check whose finding is accepted (or use --list)")
    known = set(registered())
    if check not in known:
        raise InputError(f"CHECK={check!a} is not one of dltune's checks (`dltune audit --all` lists them)")
    if clear:
        kept, ended = acks.removed(found, check, subject, now)
        acks.save(path, kept)
        output_line(
            f"dltune ack: {ended} acknowledgement(s) of {check}{' ' + subject if subject else ''} ended"
        )
        raise typer.Exit(EXIT_OK)
    if why is None or until is None:
        raise InputError("--why and --until are both needed: say why the finding is accepted and until when")
    new = acks.Ack(
        check,
        subject,
        acks.one_line(by if by is not None else operator_name(), "--by"),
        acks.one_line(why, "--why"),
        now,
        acks.parse_until(until, now),
    )
    if subject is not None:
        acks.one_line(subject, "--subject")
    acks.save(path, acks.added(found, new, now))
    output_line(
        f"dltune ack: {check}{' ' + subject if subject else ''} acknowledged by {new.by} until "
        f"{acks.iso(new.until)} ({new.why})"
    )
    raise typer.Exit(EXIT_OK)
