"""The fuzz tier: property-based tests that throw many generated inputs at a parser, a filter or the
staging and cleanup code. Each carries the `fuzz` mark, so the quick unit run (`-m "not fuzz"`, under a
minute on 2 cores) leaves them out and `make test` runs them once, with FUZZ_EXAMPLES examples each:
500 there (CI's minutes), 20,000 with `make fuzz` (DLTUNE_FUZZ_EXAMPLES)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES = int(os.environ.get("DLTUNE_FUZZ_EXAMPLES", "500"))
_FUZZ_SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
_Test = TypeVar("_Test", bound=Callable[..., Any])


def FUZZ(test: _Test) -> _Test:
    """A fuzz test: FUZZ_EXAMPLES examples, and the `fuzz` mark."""
    marked: _Test = pytest.mark.fuzz(_FUZZ_SETTINGS(test))
    return marked
