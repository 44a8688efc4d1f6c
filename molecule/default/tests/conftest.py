"""The default scenario's verifier runs on the controller against both nodes (testinfra)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.molecule_support import pytest_runtest_logreport, pytest_sessionfinish  # noqa: F401
