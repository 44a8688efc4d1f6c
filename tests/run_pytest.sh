#!/usr/bin/env bash
# `make pytest`: the unit, fuzz, integration and PyTorch tiers, one after another; every tier runs,
# any failure fails.
#
# No tier runs beside another: the lab's timing tests (the tuning ledger, the data-parallel bench) need
# the machine to themselves. The integration tests that need no lab node (neither `lab` nor `release`)
# run before the lab's own, which share its nodes and the host's loop devices; they run two at a time,
# a file to a worker (each waits on its ansible-playbook, Prometheus or Chromium children: 363-405 s
# one at a time in CI, 200-250 s so). None writes what another reads: each has its own inventory, venv
# or clone in tmp_path, and the two that build dltune's wheel from this tree in place (test_install,
# test_collection_build) take turns on tests/lab/wheelhouse.sh's lock. The NFS VM tiers (QEMU under
# TCG, `slow`) are in `make test-slow`.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
export DLTUNE_LAB_REQUIRED=1  # a missing lab or browser fails, never skips

pytest tests/unit -m "not fuzz" -n 2 --durations=10 || status=1
# The fuzz tier once, tests.fuzzing.FUZZ_EXAMPLES examples each.
pytest -m fuzz -n 2 --durations=5 || status=1
pytest tests/integration -m "not lab and not release and not slow and not fuzz" -n 2 --dist loadfile \
  --durations=10 || status=1
pytest tests/integration -m "(lab or release) and not slow and not fuzz" --durations=40 || status=1
# PyTorch in a process of its own: ansible (imported by the lab tests) patches sys.intern, which
# torch's dynamo refuses at import.
pytest tests/integration/test_bench_cpu.py tests/unit/test_bench_gpu_path.py || status=1
exit $status
