"""Fixtures shared by the integration modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_readme_commands import run_install_block


@pytest.fixture(scope="session")
def admin_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The admin's HOME after the README's Install block run verbatim (`make release`, the three
    collections installed offline, the controller's dltune, the example site): once for the session,
    for the README's tests (which run first, on the fresh install) and the lab's, which converge,
    bench and audit from it (40 s a run of the block here)."""
    home = tmp_path_factory.mktemp("admin")
    installed = run_install_block(home)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return home
