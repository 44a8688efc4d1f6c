"""Shared pytest settings: where the fixture trees are."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

# The bench's replay tests (test_bench_sdc.py) import PyTorch in-process, after pytest-testinfra has
# imported ansible, whose module_utils replace sys.intern with a patch object; torch._dynamo registers a
# stand-in for sys.intern when it is imported and refuses anything but a function. Imported here once,
# with a function in its place for that moment.
if importlib.util.find_spec("torch") is not None and "torch" not in sys.modules:
    _intern = sys.intern
    sys.intern = lambda string: _intern(string)
    try:
        import torch._dynamo  # noqa: F401  (the optimizers import it at their first step)
    finally:
        sys.intern = _intern


def _forget_readline_width() -> None:
    """GNU readline, imported by pytest (pdb's support), exports LINES and COLUMNS into the process's C
    environment, where os.environ does not see them: every child a test starts would inherit a width no
    user set (and dltune honours COLUMNS in a pipe). Set and unset through os.environ, which reaches the
    C environment too."""
    for name in ("COLUMNS", "LINES"):
        if name not in os.environ:
            os.environ[name] = ""
            del os.environ[name]


_forget_readline_width()


def pytest_sessionstart(session: pytest.Session) -> None:
    _forget_readline_width()


FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO_ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS_ROOT = REPO_ROOT / "collections"
# `dltune bench`'s smallest sizes that still train: for tests that prove a path (the bench ran, its
# sections carry numbers, it reached the report), not a figure. A CPU bench at --quick takes about
# 60 s on 2 cores, about 22 s with these.
SMALLEST_BENCH_SIZES = ("--steps", "2", "--batch", "2", "--image-size", "32")


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def load_role_module(relative_path: str) -> ModuleType:
    """A role's filter plugin or module (not a package) imported by path, for unit tests, once. Its
    name is its path (plugins.filter.data_disks): mutmut (`make mutation`) credits
    a test with the functions it runs by their module's name, which must be the mutated file's."""
    name = relative_path.removesuffix(".py").replace("/", ".")
    if name in sys.modules:
        return sys.modules[name]
    # The collection's modules import its module_utils by the collection's name, as Ansible loads
    # them: collections/ansible_collections/dltune/cluster is this repository.
    if str(COLLECTIONS_ROOT) not in sys.path:
        sys.path.append(str(COLLECTIONS_ROOT))
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / relative_path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# PyTorch refuses to import in a process where ansible (imported by the role and lab tests) has
# patched sys.intern, so the torch tests run in a pytest process of their own (`make pytest` does):
# collected only when named on the command line.
TORCH_TESTS = (
    REPO_ROOT / "tests/integration/test_bench_cpu.py",
    REPO_ROOT / "tests/unit/test_bench_gpu_path.py",
)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path not in TORCH_TESTS:
        return None
    named = {Path(arg.split("::")[0]).resolve() for arg in config.args}
    return collection_path not in named


def pytest_report_header(config: pytest.Config) -> str:
    names = ", ".join(str(path.relative_to(REPO_ROOT)) for path in TORCH_TESTS)
    return f"{names} run only when named (own process: make pytest)"


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A directory an ordinary user can enter (pytest's own tmp_path is root's 0700)."""
    base = Path(tempfile.mkdtemp(prefix="dltune-stage-"))
    base.chmod(0o777)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
