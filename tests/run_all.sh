#!/usr/bin/env bash
# `make test`: every phase CI runs, each timed; the lab comes down whatever happens.
# Ends with the phase times and, last, pytest's summary lines (unit, fuzz, integration, PyTorch).
set -uo pipefail
cd "$(dirname "$0")/.."
declare -a PHASES=()
PYTEST_SUMMARY="pytest did not run"
status=0

phase() {
  local name=$1; shift
  local start=$EPOCHREALTIME rc=0
  echo "=== phase: $name ===" >&2
  "$@" || rc=$?
  PHASES+=("$(awk -v a="$start" -v b="$EPOCHREALTIME" -v n="$name" -v rc="$rc" \
    'BEGIN{printf "%-10s %7.1fs  %s", n, b-a, (rc==0 ? "ok" : "FAILED (rc " rc ")")}')")
  return $rc
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
