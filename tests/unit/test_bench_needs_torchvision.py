"""The bench needs torch, torchvision and Pillow: a PyTorch installed without torchvision (a site's
`dltune_bench_torch_packages: [torch==...]` alone) is named before any measurement, with the role
variables that fix it, and `dltune check` does not open its bench gate for it. Packages hidden by
setting their sys.modules entry to None (Python's own way to make an import fail)."""

from __future__ import annotations

import sys

import pytest

from dltune.bench.measure import BenchError
from dltune.bench.run import _import_torch
from dltune.commands.check import _torch_installed


@pytest.mark.parametrize("missing", ["torch", "torchvision", "PIL"])
def test_the_bench_names_the_missing_package_and_the_role_variables(
    missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torchvision")
    monkeypatch.setitem(sys.modules, missing, None)
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
    pytest.importorskip("torchvision")
    assert _torch_installed()
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a)
    )
    assert not _torch_installed()


def test_a_torchvision_built_for_another_torch_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a torchvision wheel built for another torch raises at import (seen with torch 2.13.0+cpu and
    torchvision 0.28.0 from PyPI): RuntimeError "operator torchvision::nms does not exist"."""
    pytest.importorskip("torchvision")
    import dltune.bench.run as run

    real = run.importlib.import_module

    def load(name: str) -> object:
        if name == "torchvision":
            raise RuntimeError("operator torchvision::nms does not exist")
        return real(name)

    monkeypatch.setattr(run.importlib, "import_module", load)
    with pytest.raises(BenchError) as raised:
        _import_torch()
    message = str(raised.value)
    assert "torchvision does not load with PyTorch " in message
    assert "(RuntimeError: operator torchvision::nms does not exist)" in message
    assert "dltune_bench_torch_packages" in message
