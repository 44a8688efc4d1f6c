#!/usr/bin/env bash
# `make pytest`: the unit, fuzz, integration and PyTorch tiers; every tier runs, any failure fails.
#
# The NFS VM tier (tests/integration/test_nfs_multivip_vm.py: QEMU under TCG, over ten minutes in
# which QEMU holds one core and leaves the other mostly idle) runs in a pytest of its own beside
# what needs no lab node: the unit and fuzz tiers, then the integration tests marked neither `lab`
# nor `release` (the controller's own, one at a time). None of those touches the lab's nodes, loop
# devices, the storage namespace or build/wheelhouse, which the VM tier's dltune role ships (a
# `release` test rewrites it). The lab's tests follow, one at a time: they share the lab's nodes and
# the host's loop devices, and the netns tier brings up the VM tier's storage namespace again.
set -uo pipefail
cd "$(dirname "$0")/.."
VM_TIER=tests/integration/test_nfs_multivip_vm.py
mkdir -p build/logs
vm_log=build/logs/pytest-vm-tier.log
status=0
export DLTUNE_LAB_REQUIRED=1  # a missing lab, VM or browser fails, never skips

# Its own cache and temporary directories: two pytest sessions never share them. Started as a job
# (set -m): a plain background command ignores SIGINT, and so would the INT the trap below sends.
set -m
pytest "$VM_TIER" -m "not slow and not fuzz" -p no:cacheprovider --basetemp=build/pytest-vm-tier \
  --durations=5 >"$vm_log" 2>&1 &
vm_tier=$!
set +m
# Interrupted: the tier stops as on Ctrl-C, so that its fixture stops the VM and the storage namespace.
trap 'kill -INT "$vm_tier" 2>/dev/null; wait "$vm_tier"; exit 130' INT TERM

echo "=== beside the NFS VM tier ($vm_log): unit, fuzz, the integration tests that need no lab node"
pytest tests/unit -m "not fuzz" -n 2 --durations=10 || status=1
# The fuzz tier once, tests.fuzzing.FUZZ_EXAMPLES (2,000) examples each.
pytest -m fuzz -n 2 --durations=5 || status=1
pytest tests/integration -m "not lab and not release and not slow and not fuzz" --durations=10 || status=1

echo "=== the NFS VM tier, run beside them ($vm_log):"
wait "$vm_tier" || status=1
trap - INT TERM
cat "$vm_log"

pytest tests/integration -m "(lab or release) and not slow and not fuzz" --ignore="$VM_TIER" \
  --durations=40 || status=1
# PyTorch in a process of its own: ansible (imported by the lab tests) patches sys.intern, which
# torch's dynamo refuses at import.
pytest tests/integration/test_bench_cpu.py tests/unit/test_bench_gpu_path.py || status=1
exit $status
