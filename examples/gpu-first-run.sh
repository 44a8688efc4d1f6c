#!/usr/bin/env bash
# The first audit and bench on a GPU node (examples/gpu-first-run.md), collected into one folder to
# send back when a verdict looks wrong. Run it on an idle node, as root to read the kernel's Xids:
#
#     bash examples/gpu-first-run.sh OUTDIR            # dltune installed
#     DLTUNE="python3 -m dltune" bash examples/gpu-first-run.sh OUTDIR
#
# Each step has its own time limit (BENCH_TIMEOUT for the bench, 900 s by default) so that one that
# hangs still leaves the others' files; a step that fails is noted in OUTDIR/log.txt and the next
# one runs. Nothing is written outside OUTDIR and the bench's own temporary folder.
set -u

out=${1:?usage: gpu-first-run.sh OUTDIR}
mkdir -p -- "$out" || exit 2
log=$out/log.txt
read -r -a dltune_cmd <<<"${DLTUNE:-dltune}"
bench_timeout=${BENCH_TIMEOUT:-900}
bench_args=${BENCH_ARGS:-}

# The bench's determinism check needs cuBLAS's workspace fixed before the process starts (role dl_env
# sets it node-wide); set here only when the node does not already.
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}

step() { # step NAME SECONDS OUTFILE COMMAND...: run one step, its stdout to OUTFILE, note the outcome
    local name=$1 seconds=$2 file=$3 started rc
    shift 3
    started=$(date +%s)
    printf '== %s: %s\n' "$name" "$*" >>"$log"
    timeout --kill-after=10 "$seconds" "$@" >"$out/$file" 2>>"$log"
    rc=$?
    printf '== %s: exit %s after %ss\n' "$name" "$rc" "$(($(date +%s) - started))" >>"$log"
    [ "$rc" = 124 ] && printf '== %s: stopped at its %ss limit\n' "$name" "$seconds" >>"$log"
    return 0
}

date -u +'%Y-%m-%dT%H:%M:%SZ started' >"$log"
step nvidia-smi-L 30 nvidia-smi-L.txt nvidia-smi -L
step nvidia-smi-q 60 nvidia-smi-q.txt nvidia-smi -q
step collect_env 120 collect_env.txt python3 -m torch.utils.collect_env
step audit-gpu 120 audit.json "${dltune_cmd[@]}" audit --only driver,gpu --format json
step audit-all 120 audit-all.json "${dltune_cmd[@]}" audit --format json
# shellcheck disable=SC2086 # BENCH_ARGS is a list of options, split on purpose
step bench "$bench_timeout" bench.json "${dltune_cmd[@]}" bench --format json $bench_args
date -u +'%Y-%m-%dT%H:%M:%SZ finished' >>"$log"
