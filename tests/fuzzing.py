"""How many examples each property-based fuzz test runs: 2,000 in `make test` (about two minutes for
all of them on a 2-core machine), more with `make fuzz` (DLTUNE_FUZZ_EXAMPLES)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES = int(os.environ.get("DLTUNE_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
