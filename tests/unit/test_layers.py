"""The layering rule (probes read, checks judge, neither imports the other) on the syntax tree, and
the host reads that moved out of the checks: device links resolved under `--root`, not on the
machine that runs the audit."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from dltune.checks import run_checks
from dltune.model import Status
from dltune.probes import collect_snapshot
from dltune.probes.hostfs import HostFS
from tests.conftest import FIXTURES, REPO_ROOT

CHECKS = REPO_ROOT / "dltune" / "checks"
# What judging must never do: read the host, or depend on the package that does.
FORBIDDEN = {"dltune.probes", "os", "pathlib", "subprocess", "io", "socket", "shutil"}


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def test_checks_import_only_the_model_the_snapshot_and_each_other() -> None:
    offending = {
        path.name: sorted(m for m in imported_modules(path) if forbidden(m))
        for path in sorted(CHECKS.glob("*.py"))
    }
    assert {name: mods for name, mods in offending.items() if mods} == {}
    # The rule reads what it claims to: a check module that imported os would be caught.
    assert forbidden("os") and forbidden("dltune.probes.mounts") and not forbidden("dltune.snapshot")


# ARCHITECTURE.md's diagram, top to bottom: a module imports only from layers below its own (or its
# own package). A package (a directory) is one unit; dltune/__init__ is the version, at the bottom.
LAYERS = (
    ("__main__.py",),
    ("cli.py",),
    ("commands/",),
    ("fleet/", "bench/"),
    ("outputs/", "staging/"),
    ("checks/", "probes/"),  # side by side: neither imports the other
    ("files/", "snapshot.py", "health_state.py"),
    ("costs/",),
    ("schema.py",),
    ("model.py",),
    ("text.py", "records.py", "__init__.py"),
)
# What dltune/ holds at its top: the entry points, the contracts and the packages, nothing else.
TOP_LEVEL_MODULES = {"__init__.py", "__main__.py", "cli.py", "model.py", "schema.py", "snapshot.py",
                     "health_state.py", "text.py", "records.py"}  # fmt: skip


def unit_of(module: str) -> str:
    """dltune.checks.gpu -> checks/; dltune.outputs.report -> report.py; dltune -> __init__.py."""
    parts = module.split(".")[1:]
    if not parts:
        return "__init__.py"
    package = REPO_ROOT / "dltune" / parts[0]
    return f"{parts[0]}/" if package.is_dir() else f"{parts[0]}.py"


def layer_of(unit: str) -> int:
    return next(index for index, units in enumerate(LAYERS) if unit in units)


def dltune_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "dltune":
            # `from dltune import safeio` names a module; `from dltune import __version__` the package.
            found.update(
                f"dltune.{alias.name}" if (REPO_ROOT / "dltune" / f"{alias.name}.py").exists() else "dltune"
                for alias in node.names
            )
        elif (
            isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("dltune.")
        ):
            found.add(str(node.module))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("dltune"))
    return found


def test_every_module_imports_only_layers_below_its_own() -> None:
    sources = sorted((REPO_ROOT / "dltune").rglob("*.py"))
    units = {unit_of("dltune." + ".".join(p.relative_to(REPO_ROOT / "dltune").with_suffix("").parts))
             for p in sources}  # fmt: skip
    placed = {unit for units_of_layer in LAYERS for unit in units_of_layer}
    assert units - {"__init__.py"} <= placed, f"not in ARCHITECTURE's layers: {sorted(units - placed)}"
    upward = []
    for path in sources:
        relative = path.relative_to(REPO_ROOT / "dltune").with_suffix("").parts
        own = (
            unit_of("dltune." + ".".join(relative)) if relative[-1] != "__init__" or len(relative) > 1 else ""
        )
        own = own or "__init__.py"
        for imported in dltune_imports(path):
            target = unit_of(imported)
            if target != own and layer_of(target) <= layer_of(own):
                upward.append(f"{path.relative_to(REPO_ROOT)} imports {imported} ({target}, not below {own})")
    assert upward == []
    # The rule reads what it claims to: checks importing the probes (or the reverse), or the snapshot
    # importing a probe, would be refused.
    assert layer_of(unit_of("dltune.probes.mounts")) == layer_of(unit_of("dltune.checks.gpu"))
    assert layer_of(unit_of("dltune.snapshot")) > layer_of(unit_of("dltune.probes"))


# Inside dltune/staging/, top to bottom (ARCHITECTURE.md): the command and --broadcast over the copy
# engine and the archive reader, over where a dataset lands and what is recorded, over the scan and
# the room, over the types. __init__ re-exports the package's interface and stands above them all.
STAGING_LAYERS = (
    ("broadcast",),
    ("stage",),
    ("archive", "plan"),
    ("copy", "destination"),
    ("record", "scan"),
    ("room",),
    ("model", "compat"),
)


def test_staging_modules_import_only_modules_below_their_own() -> None:
    staging = REPO_ROOT / "dltune" / "staging"
    placed = {name for layer in STAGING_LAYERS for name in layer}
    modules = {path.stem for path in staging.glob("*.py")} - {"__init__"}
    assert modules == placed, f"place every staging module in STAGING_LAYERS: {sorted(modules ^ placed)}"

    def layer(name: str) -> int:
        return next(index for index, names in enumerate(STAGING_LAYERS) if name in names)

    upward = [
        f"staging/{path.name} imports {imported}"
        for path in sorted(staging.glob("*.py"))
        if path.stem != "__init__"
        for imported in dltune_imports(path)
        if imported.startswith("dltune.staging")
        and (imported == "dltune.staging" or layer(imported.split(".")[2]) <= layer(path.stem))
    ]
    assert upward == []
    # Nothing below the command may reach the package's interface (a cycle through __init__).
    assert layer("stage") < layer("copy") < layer("model")


def test_the_snapshot_module_does_no_io() -> None:
    assert not {m for m in imported_modules(REPO_ROOT / "dltune" / "snapshot.py") if forbidden(m)}


def test_resolve_follows_links_inside_the_audited_root(tmp_path: Path) -> None:
    (tmp_path / "dev" / "mapper").mkdir(parents=True)
    (tmp_path / "dev" / "dm-3").touch()
    (tmp_path / "dev" / "mapper" / "vg-data").symlink_to("../dm-3")
    (tmp_path / "dev" / "mapper" / "vg-abs").symlink_to("/dev/dm-3")  # absolute: restarts at the root
    (tmp_path / "dev" / "loop-a").symlink_to("loop-b")
    (tmp_path / "dev" / "loop-b").symlink_to("loop-a")
    fs = HostFS(tmp_path)
    assert fs.resolve("/dev/mapper/vg-data") == "/dev/dm-3"
    assert fs.resolve("/dev/mapper/vg-abs") == "/dev/dm-3"
    assert fs.resolve("/dev/sdz") == "/dev/sdz"  # absent: the name itself, as realpath -m
    assert fs.resolve("/dev/mapper/../dm-3") == "/dev/dm-3"
    fs.resolve("/dev/loop-a")  # a loop of links ends (after 40 links), it does not hang


@pytest.mark.parametrize(("target", "status"), [("/dev/nvme0n1", Status.PASS), ("/dev/nvme9n9", Status.FAIL)])
def test_a_data_disk_mounted_through_a_link_is_judged_by_the_audited_hosts_links(
    tmp_path: Path, target: str, status: Status
) -> None:
    """The check used os.path.realpath on the machine running the audit, so under --root a mount from
    /dev/mapper/... was compared with this machine's /dev, not the audited tree's."""
    root = tmp_path / "node"
    shutil.copytree(FIXTURES / "data_ok_managed", root, symlinks=True)
    mountinfo = root / "proc" / "self" / "mountinfo"
    mountinfo.write_text(mountinfo.read_text().replace("ext4 /dev/nvme0n1 ", "ext4 /dev/mapper/vg-scratch "))
    (root / "dev" / "mapper").mkdir()
    (root / "dev" / "mapper" / "vg-scratch").symlink_to(target)
    results = {
        r.subject: r for r in run_checks(collect_snapshot(root), ["storage"]) if r.id == "storage.data_fstab"
    }
    assert results["/data/scratch"].status is status, results["/data/scratch"].summary


LONG_FUNCTION = 60


def test_a_function_over_60_lines_says_why() -> None:
    """A long function is a smell unless its length has a reason, written above it as `# long: ...`:
    in dltune and in the roles' modules and filter plugins."""
    unexplained = []
    for path in sorted([*(REPO_ROOT / "dltune").rglob("*.py"), *(REPO_ROOT / "roles").rglob("*.py")]):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            long = (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.end_lineno is not None
                and node.end_lineno - node.lineno + 1 > LONG_FUNCTION
            )
            if long:
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])  # type: ignore[attr-defined]
                if not lines[start - 2].strip().startswith("# long: "):
                    unexplained.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name}")  # type: ignore[attr-defined]
    assert unexplained == []


def test_the_top_level_holds_only_entry_points_contracts_and_packages() -> None:
    """A new module finds its package (ARCHITECTURE.md names them) rather than the top level."""
    top = {p.name for p in (REPO_ROOT / "dltune").glob("*.py")}
    assert top == TOP_LEVEL_MODULES, f"loose modules: {sorted(top - TOP_LEVEL_MODULES)}"
    packages = {p.name for p in (REPO_ROOT / "dltune").iterdir() if (p / "__init__.py").is_file()}
    assert packages == {
        "bench",
        "checks",
        "commands",
        "costs",
        "files",
        "fleet",
        "outputs",
        "probes",
        "staging",
    }
