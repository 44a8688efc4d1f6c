"""`make mutation`: mutmut over the decision modules ([tool.mutmut] in pyproject.toml), then the score.

    python tests/mutation.py run --max-children 2   # mutmut itself (incremental: mutants/ keeps results)
    python tests/mutation.py score                  # killed / (killed + survived), and the survivors

mutmut copies tests/ into mutants/ with shutil.copytree, which follows symlinks and fails on the
fixture trees' links (dev/disk/by-uuid/* point at devices that exist only on a real host): the copy
here keeps links as links. mutmut records which tests run which function once, and again only for
test files that changed: after changing a shared helper (tests/conftest.py), delete
mutants/mutmut-stats.json so that every test is asked again. A survivor listed in
tests/mutation_equivalent.txt (a mutant no test can tell from the original, with the reason) is left
out of the score and of the list.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = REPO_ROOT / "tests" / "mutation_equivalent.txt"
KILLED_EXIT_CODES = {1, 3, 36, 37, -24, 24, 152, 255}  # a failing test, a timeout, a type error
# Survived: every test passed, or no test runs the mutated function at all (mutmut's "no tests").
SURVIVED_EXIT_CODES = {0, 5, 33}

_copytree = shutil.copytree


def _copytree_keeping_links(src: Any, dst: Any, symlinks: bool = True, *args: Any, **kwargs: Any) -> Any:
    # A second run copies over the first: links already there are made again.
    for directory, dirs, files in os.walk(dst):
        # os.walk lists a link to a directory (collections/.../cluster) among the directories.
        for name in files + dirs:
            if os.path.islink(os.path.join(directory, name)):
                os.unlink(os.path.join(directory, name))
    return _copytree(src, dst, symlinks, *args, **kwargs)


def refresh_copied_files(mutants: Path = REPO_ROOT / "mutants") -> None:
    """mutmut regenerates the mutated .py files that changed, but copies the other files of its source
    paths (a role's tasks, defaults, templates) only into a new mutants/: a later run would test the
    code against stale ones. Copy every changed non-Python file again."""
    if not mutants.is_dir():
        return
    for root in ("dltune", "roles"):
        for source in (REPO_ROOT / root).rglob("*"):
            if source.is_file() and not source.is_symlink() and source.suffix not in {".py", ".pyc"}:
                copy = mutants / source.relative_to(REPO_ROOT)
                if not copy.exists() or copy.read_bytes() != source.read_bytes():
                    copy.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, copy)


def forget_survivors(mutants: Path = REPO_ROOT / "mutants") -> None:
    """mutmut keeps a result while its function is unchanged, a survivor's and "no tests" included:
    a test written since to kill it would never be credited. Survivors are forgotten and decided again
    (killed mutants stay killed: a full run from nothing is `rm -rf mutants`)."""
    for meta in mutants.rglob("*.py.meta"):
        data = json.loads(meta.read_text())
        codes = data.get("exit_code_by_key", {})
        if any(code in SURVIVED_EXIT_CODES for code in codes.values()):
            undecided = {key: None for key, code in codes.items() if code in SURVIVED_EXIT_CODES}
            data["exit_code_by_key"] = {**codes, **undecided}
            meta.write_text(json.dumps(data))


def equivalent_mutants() -> dict[str, str]:
    """`mutant name  reason` lines; # starts a comment."""
    listed = {}
    for line in EQUIVALENT.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, reason = line.partition(" ")
            listed[name] = reason.strip()
    return listed


def score(mutants: Path = REPO_ROOT / "mutants") -> int:
    """Print the score per module and overall, and each survivor not explained; 0 at or above 90%."""
    equivalent = equivalent_mutants()
    survivors: list[str] = []
    totals = [0, 0]
    for meta in sorted(mutants.rglob("*.py.meta")):
        exit_codes = json.loads(meta.read_text())["exit_code_by_key"]
        killed = sum(1 for code in exit_codes.values() if code in KILLED_EXIT_CODES)
        alive = [name for name, code in exit_codes.items() if code in SURVIVED_EXIT_CODES]
        alive = [name for name in alive if name not in equivalent]
        survivors += alive
        totals[0] += killed
        totals[1] += killed + len(alive)
        module = meta.relative_to(mutants).as_posix().removesuffix(".meta")
        judged = killed + len(alive)
        print(f"{module:48} {killed:5} killed of {judged:5}  {_percent(killed, judged)}")
    for name in sorted(survivors):
        print(f"survived: {name}")
    shown = _percent(*totals)
    print(f"mutation score: {totals[0]} killed of {totals[1]} ({shown}); {len(equivalent)} equivalent")
    return 0 if totals[1] and totals[0] / totals[1] >= 0.9 else 1


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


if __name__ == "__main__":
    if sys.argv[1:2] == ["score"]:
        sys.exit(score())
    refresh_copied_files()
    forget_survivors()
    shutil.copytree = _copytree_keeping_links  # type: ignore[assignment]
    from mutmut.__main__ import cli

    sys.exit(cli())
