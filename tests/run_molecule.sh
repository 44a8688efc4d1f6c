#!/usr/bin/env bash
# `make molecule`: every scenario named on the command line, in two streams side by side; all run, any
# failure fails. Each scenario's output goes to build/logs/molecule-<scenario>.log and is printed
# whole when it ends; the failed ones are listed in build/logs/molecule-failed (tests/run_all.sh
# ends with their failing lines).
#
# Why two streams: on two cores a scenario leaves much of the machine idle (Docker's exec round trips,
# apt through the cache, ubuntu-drivers and Slurm waiting), and nvidia_driver alone is as long as the
# others together. Why no more: the lab's loop devices. `data_disks` takes six of the host's eight, so
# it is the only loop-device scenario, and it never runs beside another one.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/logs
LONG=nvidia_driver  # a stream of its own; the others run one after another in the second stream

run_scenario() {
  local scenario=$1 start=$SECONDS rc=0
  molecule test -s "$scenario" >"build/logs/molecule-$scenario.log" 2>&1 || rc=$?
  # One writer at a time on stdout: a finished scenario's log is printed whole, under a lock.
  {
    flock 9
    cat "build/logs/molecule-$scenario.log"
    echo "[time] molecule $scenario: $((SECONDS - start))s$([ "$rc" -eq 0 ] || echo " FAILED (rc $rc)")"
  } 9>build/logs/molecule.print.lock
  [ "$rc" -eq 0 ] || echo "$scenario" >>build/logs/molecule-failed.tmp
}

run_stream() {
  local scenario
  for scenario in "$@"; do run_scenario "$scenario"; done
}

rm -f build/logs/molecule-failed.tmp
long=() rest=()
for scenario in "$@"; do
  if [ "$scenario" = "$LONG" ]; then long+=("$scenario"); else rest+=("$scenario"); fi
done
# Started as a job (set -m: a process group of its own): a plain background command ignores SIGINT.
set -m
run_stream "${long[@]}" &
long_pid=$!
set +m
# Interrupted: the stream beside stops as on Ctrl-C too.
trap 'kill -INT -- -"$long_pid" 2>/dev/null; wait "$long_pid"; exit 130' INT TERM
run_stream "${rest[@]}"
wait "$long_pid"
trap - INT TERM
failed=$(sort build/logs/molecule-failed.tmp 2>/dev/null | tr '\n' ' ')
echo "$failed" >build/logs/molecule-failed
rm -f build/logs/molecule-failed.tmp
if [ -n "$failed" ]; then echo "molecule scenarios failed: $failed"; exit 1; fi
