"""Every `dltune` command line the admin's documentation shows (README.md, docs/ but the developers'
development.md, the role READMEs, examples/) parses with dltune's own CLI as written: the command, each
option and each value it is given exist and are accepted (typer's click command builds its context,
nothing runs, nothing reads this host). A command line is a fenced code block's line or a code span that
gives at least one option; a synopsis (`[--format human|json]`) and alternatives (`2|3`) are not
invocations, and shell redirections end the line. The ansible-playbook lines are run against the
installed collection: tests/integration/test_readme_commands.py."""

from __future__ import annotations

import re
import shlex

import pytest
import typer

from dltune.cli import app
from tests.conftest import REPO_ROOT

DOCS = [
    p
    for pattern in ("README.md", "docs/*.md", "roles/*/README.md", "examples/*.md")
    for p in sorted(REPO_ROOT.glob(pattern))
    if p.name != "development.md"
]
SHELL_ENDS = {">", ">>", "|", "||", "&&", ";", "2>&1", "&"}


def documented_command_lines() -> list[tuple[str, list[str]]]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        blocks = "\n".join(re.findall(r"```[a-z]*\n(.*?)```", text, re.S))
        lines = re.findall(r"^\s*(dltune [^\n#]*)", blocks, re.M)
        lines += [span for span in re.findall(r"`(dltune [a-z][^`]*)`", text) if " -" in span]
        for line in lines:
            if "[" in line or "|" in line.replace("||", "") or "..." in line:
                continue
            words = shlex.split(line.replace("\\\n", " "))
            ends = [i for i, word in enumerate(words) if word in SHELL_ENDS or word.startswith(">")]
            found.append((doc.relative_to(REPO_ROOT).as_posix(), words[1 : ends[0]] if ends else words[1:]))
    return found


COMMAND_LINES = documented_command_lines()


def test_the_docs_show_command_lines_of_every_command() -> None:
    shown = {words[0] for _, words in COMMAND_LINES}
    assert {"audit", "bench", "check", "report", "stage"} <= shown, shown
    assert len(COMMAND_LINES) >= 25


@pytest.mark.parametrize(("doc", "words"), COMMAND_LINES, ids=[" ".join(w)[:60] for _, w in COMMAND_LINES])
def test_each_documented_command_line_parses_as_written(doc: str, words: list[str]) -> None:
    group = typer.main.get_command(app)  # typer's own click (vendored): its classes, not click's
    context = group.context_class(group, info_name="dltune")
    command = group.get_command(context, words[0])  # type: ignore[attr-defined]
    assert command is not None, f"{doc}: no command {words[0]!r}"
    try:
        command.make_context(words[0], list(words[1:]), parent=context)
    except Exception as exc:  # click's usage errors, whichever click typer carries
        if type(exc).__name__ != "Exit":  # --help, --version end parsing with Exit
            pytest.fail(f"{doc}: dltune {' '.join(words)}: {getattr(exc, 'format_message', exc.__str__)()}")
