#!/usr/bin/env bash
# `make test`: every phase CI runs, each timed; the lab comes down whatever happens.
# Ends with the phase times and, last, pytest's summary lines (unit, fuzz, integration, PyTorch).
set -uo pipefail
cd "$(dirname "$0")/.."
declare -a PHASES=()
rm -f build/logs/molecule-failed
PYTEST_SUMMARY="pytest did not run"
status=0

phase() {
  local name=$1; shift
  local start=$EPOCHREALTIME rc=0
  echo "=== phase: $name ===" >&2
  "$@" || rc=$?
  # The disk left after each phase: a machine that ran short shows it here (a test that judges free
  # space, a scenario that died writing, would otherwise look like a bug of ours).
  local free
  free=$(df -h --output=avail / | tail -1 | tr -d ' ')
  PHASES+=("$(awk -v a="$start" -v b="$EPOCHREALTIME" -v n="$name" -v rc="$rc" -v free="$free" \
    'BEGIN{printf "%-10s %7.1fs  %-15s disk free %s", n, b-a, (rc==0 ? "ok" : "FAILED (rc " rc ")"), free}')")
  return $rc
}

# Why each failed molecule scenario failed, from its log (Makefile: molecule): the task failures,
# the failing tests and molecule's own errors, last ones first cut.
molecule_failures() {
  local failed scenario
  failed=$(cat build/logs/molecule-failed 2>/dev/null) || return 0
  for scenario in $failed; do
    echo "molecule $scenario failed; from build/logs/molecule-$scenario.log:"
    grep -E '^(fatal:|failed:|FAILED|E  |ERROR|CRITICAL)|unreachable=[1-9]|failed=[1-9]|Error:' \
      "build/logs/molecule-$scenario.log" | tail -25 | cut -c1-400 | sed 's/^/    /'
  done
}

run_pytest() {
  local log
  log=$(mktemp)
  make -s pytest 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  PYTEST_SUMMARY=$(grep -E '^=+ .*(passed|failed|error).* =+$' "$log")
  rm -f "$log"
  return "$rc"
}

finish() {
  phase lab-down make -s lab-down || true
  echo
  molecule_failures
  echo "Phase times:"
  printf '  %s\n' "${PHASES[@]}"
  echo "$PYTEST_SUMMARY"
}
trap finish EXIT

phase venv make -s venv || exit 1
phase lab env DLTUNE_LAB_WITH_NODES=0 make -s lab || exit 1
phase lint make -s lint || status=1
phase py310 make -s py310 || status=1
phase molecule make -s molecule || status=1
phase nodes make -s lab || exit 1
phase pytest run_pytest || status=1
exit $status
