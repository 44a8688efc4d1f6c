#!/usr/bin/env bash
# `make test`: every phase CI runs, each timed; the lab comes down whatever happens.
# Ends with the phase times and, last, pytest's summary lines (unit, fuzz, integration, PyTorch).
set -uo pipefail
cd "$(dirname "$0")/.."
# Bytecode is written: under a PYTHONDONTWRITEBYTECODE shell every process compiles the checkout's
# modules again (each pytest session and xdist worker, each controller-side dltune run); collecting
# the unit tier took 25 s that way here, 14 s from bytecode.
unset PYTHONDONTWRITEBYTECODE
declare -a PHASES=()
rm -f build/logs/molecule-failed
PYTEST_SUMMARY="pytest did not run"
mkdir -p build/logs
PHASE_TIMES=build/logs/phase-times.txt
: >"$PHASE_TIMES"
status=0

phase() {
  local name=$1; shift
  local start=$EPOCHREALTIME rc=0
  echo "=== phase: $name ===" >&2
  echo "$name (from $(date +%T))" >build/logs/phase-now
  "$@" || rc=$?
  record "$name" "$start" "$EPOCHREALTIME" "$rc" ""
  return $rc
}

record() {
  local name=$1 start=$2 end=$3 rc=$4 note=$5
  # The disk left after each phase: a machine that ran short shows it here (a test that judges free
  # space, a scenario that died writing, would otherwise look like a bug of ours).
  local free
  free=$(df -h --output=avail / | tail -1 | tr -d ' ')
  PHASES+=("$(awk -v a="$start" -v b="$end" -v n="$name" -v rc="$rc" -v free="$free" -v note="$note" \
    'BEGIN{printf "%-10s %7.1fs  %-15s disk free %s%s", n, b-a, (rc==0 ? "ok" : "FAILED (rc " rc ")"), free, note}')")
  printf '  %s\n' "${PHASES[-1]}" >>"$PHASE_TIMES"
}

# CI stops a run at 90 minutes, before the phase times this script prints at its end: a run still
# going at DLTUNE_REPORT_AT seconds (85 minutes) prints the times of the phases done so far and the
# one running, so that the end of a log cut there still says where the time went. It stops nothing.
report_late() {
  # Its own descriptors: a sleep left behind must not hold the log's pipe open.
  sleep "${DLTUNE_REPORT_AT:-5100}" </dev/null >/dev/null 2>&1 || return 0
  echo "=== still running after ${DLTUNE_REPORT_AT:-5100} s; phase times so far:" >&2
  cat "$PHASE_TIMES" >&2
  echo "  running: $(cat build/logs/phase-now 2>/dev/null)" >&2
}

# A phase that runs beside the next ones (each short, with a core left idle by downloads or by a
# single-threaded tool): its output goes to build/logs/phase-<name>.log, shown when it is collected;
# its time is its own, from its start to its end.
declare -A BESIDE_PID=() BESIDE_START=()
beside() {
  local name=$1; shift
  echo "=== phase: $name (beside the next phases: build/logs/phase-$name.log) ===" >&2
  BESIDE_START[$name]=$EPOCHREALTIME
  ( rc=0; "$@" >"build/logs/phase-$name.log" 2>&1 || rc=$?
    echo "$EPOCHREALTIME" >"build/logs/phase-$name.end"; exit "$rc" ) &
  BESIDE_PID[$name]=$!
}

collect() {
  local name=$1 rc=0 end
  wait "${BESIDE_PID[$name]}" || rc=$?
  unset "BESIDE_PID[$name]"
  echo "=== phase: $name (ran beside; its output) ===" >&2
  cat "build/logs/phase-$name.log"
  end=$(cat "build/logs/phase-$name.end" 2>/dev/null)
  record "$name" "${BESIDE_START[$name]}" "${end:-$EPOCHREALTIME}" "$rc" "  (ran beside the next phases)"
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
  # A phase still running beside (the run stopped before collecting it) stops with the run.
  [ ${#BESIDE_PID[@]} -eq 0 ] || kill "${BESIDE_PID[@]}" 2>/dev/null
  kill "$REPORT_LATE_PID" 2>/dev/null
  phase lab-down make -s lab-down || true
  echo
  molecule_failures
  echo "Phase times:"
  printf '  %s\n' "${PHASES[@]}"
  echo "$PYTEST_SUMMARY"
}
trap finish EXIT
report_late &
REPORT_LATE_PID=$!

phase venv make -s venv || exit 1
phase lab env DLTUNE_LAB_WITH_NODES=0 make -s lab || exit 1
# Beside lint: the oldest Python's tier (a venv of its own: pip's downloads).
beside py310 make -s py310
phase lint make -s lint || status=1
collect py310 || status=1
phase molecule make -s molecule || status=1
phase nodes make -s lab || exit 1
phase pytest run_pytest || status=1
exit $status
