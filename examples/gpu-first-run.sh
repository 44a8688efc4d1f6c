#!/usr/bin/env bash
# The first audit and bench on a GPU node (examples/gpu-first-run.md), collected into one folder to
# send back when a verdict looks wrong. Run it on an idle node, as root to read the kernel's Xids:
#
#     bash examples/gpu-first-run.sh OUTDIR            # dltune installed
#     DLTUNE="python3 -m dltune" bash examples/gpu-first-run.sh OUTDIR
#
# Each step has its own time limit (BENCH_TIMEOUT for the bench, 900 s by default) so that one that
# hangs still leaves the others' files; a step that fails says so on stderr and in OUTDIR/log.txt, and
# the next one runs. The script exits 0 only when every step did its part, 1 when one or more failed
# (each named on its last line), 2 on a usage error. A dltune verdict with findings (exit 1) is a step
# that did its part: its JSON holds them. Nothing is written outside OUTDIR and the bench's own
# temporary folder.
set -euo pipefail

if [ "$#" -ne 1 ] || [ -z "$1" ]; then
    echo "usage: gpu-first-run.sh OUTDIR" >&2
    exit 2
fi
out=$1
mkdir -p -- "$out" || exit 2
log=$out/log.txt
read -r -a dltune_cmd <<<"${DLTUNE:-dltune}"
bench_timeout=${BENCH_TIMEOUT:-900}
bench_args=${BENCH_ARGS:-}
failed=()

# The bench's determinism check needs cuBLAS's workspace fixed before the process starts (role dl_env
# sets it node-wide); set here only when the node does not already.
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}

say() { # say LINE: one line on stderr and in the log
    printf 'gpu-first-run: %s\n' "$1" >&2
    printf '== %s\n' "$1" >>"$log"
}

# step NAME SECONDS OUTFILE OK_CODES COMMAND...: run one step, its stdout to OUTFILE, its stderr to the
# log; a code outside OK_CODES (space-separated) is a failure: said, and counted for the exit code.
step() {
    local name=$1 seconds=$2 file=$3 ok=$4 started rc=0 why
    shift 4
    started=$(date +%s)
    printf '== %s: %s\n' "$name" "$*" >>"$log"
    timeout --kill-after=10 "$seconds" "$@" >"$out/$file" 2>>"$log" || rc=$?
    printf '== %s: exit %s after %ss\n' "$name" "$rc" "$(($(date +%s) - started))" >>"$log"
    case " $ok " in
    *" $rc "*)
        if [ "$rc" = 0 ]; then why=done; else why="done (exit $rc: findings, in $file)"; fi
        say "$name: $why"
        return 0
        ;;
    esac
    case $rc in
    124 | 137) why="stopped at its ${seconds}s limit, exit $rc" ;;
    126 | 127) why="$1: not found or not executable, exit $rc" ;;
    *) why="exit $rc" ;;
    esac
    say "$name: FAILED ($why); see $log"
    failed+=("$name")
}

date -u +'%Y-%m-%dT%H:%M:%SZ started' >"$log"
step nvidia-smi-L 30 nvidia-smi-L.txt 0 nvidia-smi -L
step nvidia-smi-q 60 nvidia-smi-q.txt 0 nvidia-smi -q
step collect_env 120 collect_env.txt 0 python3 -m torch.utils.collect_env
# dltune: 0 no finding, 1 findings (a verdict, in the JSON); 2 and above: no verdict.
step audit-gpu 120 audit.json "0 1" "${dltune_cmd[@]}" audit --only driver,gpu --format json
step audit-all 120 audit-all.json "0 1" "${dltune_cmd[@]}" audit --format json
# shellcheck disable=SC2086 # BENCH_ARGS is a list of options, split on purpose
step bench "$bench_timeout" bench.json "0 1" "${dltune_cmd[@]}" bench --format json $bench_args
date -u +'%Y-%m-%dT%H:%M:%SZ finished' >>"$log"

if [ "${#failed[@]}" -gt 0 ]; then
    say "${#failed[@]} of 6 steps failed: ${failed[*]}; what the others wrote is in $out"
    exit 1
fi
say "all 6 steps done; the files are in $out"
