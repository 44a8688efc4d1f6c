"""The bench needs torch, torchvision and Pillow: a PyTorch installed without torchvision (a site's
`dltune_bench_torch_packages: [torch==...]` alone) is named before any measurement, with the role
variables that fix it, and `dltune check` does not open its bench gate for it. The imports are
answered by stand-in modules (a real torch cannot be imported in a process where ansible patched
sys.intern, as the unit run's workers are), one of them missing or broken as a site's would be."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from types import ModuleType

import pytest

from dltune.bench.measure import BenchError
from dltune.bench.run import _import_torch
from dltune.commands.check import _torch_installed


def stand_ins(monkeypatch: pytest.MonkeyPatch, failing: str, error: Exception) -> None:
    """dltune.bench.run's imports answered by empty modules, ``failing`` raising ``error``."""
    import dltune.bench.run as run

    def load(name: str) -> ModuleType:
        if name == failing:
            raise error
        return ModuleType(name)

    monkeypatch.setattr(run.importlib, "import_module", load)


@pytest.mark.parametrize("missing", ["torch", "torchvision", "PIL"])
def test_the_bench_names_the_missing_package_and_the_role_variables(
    missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_ins(monkeypatch, missing, ModuleNotFoundError(f"No module named {missing!r}", name=missing))
    with pytest.raises(BenchError) as raised:
        _import_torch()
    message = str(raised.value)
    assert message.startswith("dltune bench needs PyTorch with torchvision")
    assert f"({missing} is not installed where dltune runs)" in message
    assert "dltune_bench_python" in message and "dltune_bench_torch_packages" in message


@pytest.mark.parametrize("missing", ["torch", "torchvision"])
def test_check_counts_pytorch_as_installed_only_with_torchvision(
    missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = importlib.machinery.ModuleSpec("found", None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: found)
    assert _torch_installed()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else found)
    assert not _torch_installed()


def test_a_torchvision_built_for_another_torch_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a torchvision wheel built for another torch raises at import (seen with torch 2.13.0+cpu and
    torchvision 0.28.0 from PyPI): RuntimeError "operator torchvision::nms does not exist"."""
    stand_ins(monkeypatch, "torchvision", RuntimeError("operator torchvision::nms does not exist"))
    with pytest.raises(BenchError) as raised:
        _import_torch()
    message = str(raised.value)
    assert "torchvision does not load with PyTorch " in message
    assert "(RuntimeError: operator torchvision::nms does not exist)" in message
    assert "dltune_bench_torch_packages" in message
