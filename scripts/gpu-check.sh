#!/usr/bin/env bash
# The GPU check: one script, every step under its own timeout, the whole within
# CHECK_BUDGET_S (570 s: the 10 minutes of device time it is allotted), no
# network, at most 8 result files in $OUT.
#
#   WHEELS=DIR OUT=DIR bash scripts/gpu-check.sh              # on the GPU node
#   OUT=DIR bash scripts/gpu-check.sh --rehearse              # here: the CPU interpreter
#   OUT=DIR bash scripts/gpu-check.sh --rehearse --target sm_90   # here: compile only, for sm_90
#
# It installs tik-agent (and what the node lacks) from a wheel folder made
# beforehand by `bash scripts/gpu-wheels.sh DIR` on a machine with a registry,
# with `pip install --no-index --no-deps --target` beside the node's own torch and
# triton (never replacing them), then: the environment and measured ceilings;
# one Triton cache for the node, warmed by the compile-only replay of the later
# steps' launches on all its cores (every worker starts from a copy); bit probes
# of each seed's tunables; `tik-agent eval` of each seed against
# itself (microseconds per cell, GB/s, % of the copy ceiling, launch overhead);
# a 3-iteration offline `optimize --device cuda`; `export`, the wheel's
# `verify()`, the op under torch.compile and inside a CUDA graph capture.
#
# --rehearse runs the same steps on the CPU: the interpreter, the smallest
# shapes, the same install-from-wheels path (it makes the wheel folder itself,
# for this machine's Python, unless WHEELS is given), everything but the
# device-only measurements.  Within 15 minutes on 2 cores; CI runs it.
#
# Step limits (scripts/gpu_check_limits.py): a timed step's run estimate plus the
# seconds its launches took to compile in the compile-only rehearsal (so that a
# cold cache makes it slow, not killed), cut on the node to what the budget has
# left after the later steps' run estimates; a step left under 10 s is skipped.
#
# --rehearse --target sm_90 replays the steps' launches instead (probes, eval of each
# seed, the workload cells), each compiled for sm_90 by Triton's own compiler and
# ptxas behind a stand-in driver, none run (tik_agent/backends/compile_rehearsal.py):
# compile.json gives variants and compile seconds per step and, per kernel of every
# seed at its workload shapes, registers, spills, grid, warps and stages.
#
# Results: summary.md (the tables for docs/gpu.md), environment.json,
# compile.json (the warm step's, or the compile-only rehearsal's), probes.json,
# evals.json, optimize.txt, log.txt (everything printed).
set -uo pipefail
BUDGET=${CHECK_BUDGET_S:-570}   # seconds for the whole check on the node, from its start
REPO=$(cd "$(dirname "$0")/.." && pwd)
REHEARSE=0
TARGET=
while [ $# -gt 0 ]; do
  case $1 in
    --rehearse) REHEARSE=1 ;;
    --target) TARGET=${2:-}; shift
      [ -n "$TARGET" ] || { echo "gpu-check: --target needs a value (sm_90)" >&2; exit 2; } ;;
    *) echo "gpu-check: unknown argument $1 (expected --rehearse, --target sm_90)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$TARGET" ] && [ "$REHEARSE" != 1 ]; then
  echo "gpu-check: --target is the compile-only rehearsal: give --rehearse too" >&2; exit 2
fi
PY=${PYTHON:-python3}
# the steps run from a scratch folder: a relative interpreter path must not break them
case $PY in */*) PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY") ;; esac
OUT=$(mkdir -p "${OUT:-gpu-check-out}" && cd "${OUT:-gpu-check-out}" && pwd)
WORK=$(mktemp -d)
# mktemp makes it 0700: a worker dropped to nobody (unshare with setpriv, no mount view of
# its own) could not import the package installed below it.  Nothing secret lives here.
chmod 755 "$WORK"
trap 'rm -rf "$WORK"' EXIT
: > "$OUT/summary.md"
exec > >(tee -a "$OUT/log.txt") 2>&1
exec 3>&1   # the log, for step headers when a step's own stdout goes to a result file

FAILED=0
FAILED_STEPS=
# step NAME SECONDS CMD...: run under its own timeout, record the outcome, carry on.
step() {
  local name=$1 limit=$2; shift 2
  [ "$REHEARSE" = 1 ] && limit=$(( limit * ${REHEARSE_SCALE:-4} ))
  local t0=$SECONDS
  echo "== $name (limit ${limit}s)" >&3
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  local took=$(( SECONDS - t0 ))
  [ $rc = 124 ] && echo "== $name: TIMED OUT after ${limit}s" >&3
  [ $rc != 0 ] && { FAILED=$(( FAILED + 1 )); FAILED_STEPS="$FAILED_STEPS $name(exit $rc)"; }
  echo "- step $name: exit $rc, ${took}s" >> "$WORK/steps.tmp"
  return $rc
}
# The timed steps, in order: each one's limit sets aside the later ones' run estimates.
TIMED=(warm probes eval-rmsnorm eval-add_rmsnorm eval-logprobs eval-matmul eval-attention optimize export)
# timed NAME CMD...: step NAME under the limit scripts/gpu_check_limits.py gives it with what the
# budget has left (the rehearsal has no budget, and its interpreter compiles nothing: its limits
# are the run estimates, scaled in step).
timed() {
  local name=$1 later=() seen=0 s; shift
  for s in "${TIMED[@]}"; do [ $seen = 1 ] && later+=("$s"); [ "$s" = "$name" ] && seen=1; done
  local left=$(( BUDGET - SECONDS )) how=
  [ "$REHEARSE" = 1 ] && { left=1000000; how=--interpreted; }
  local limit
  limit=$("$PY" "$REPO/scripts/gpu_check_limits.py" limit "$name" "$left" "$(nproc)" $how "${later[@]}") \
    || { echo "== $name: no limit (scripts/gpu_check_limits.py failed)" >&3; limit=0; }
  if [ "$limit" = 0 ]; then
    echo "== $name: SKIPPED: ${left}s of the ${BUDGET}s budget left, the later steps need theirs" >&3
    FAILED=$(( FAILED + 1 )); FAILED_STEPS="$FAILED_STEPS $name(skipped)"
    echo "- step $name: skipped, ${left}s left" >> "$WORK/steps.tmp"
    return 1
  fi
  step "$name" "$limit" "$@"
}

if [ "$REHEARSE" = 1 ]; then
  DEVICE=cpu
  export TRITON_INTERPRET=1
  SMALL=--small
  if [ -z "${WHEELS:-}" ]; then
    WHEELS=$WORK/wheels
    PYVER=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    step wheels 150 env PYVER="$PYVER" PYTHON="$PY" bash "$REPO/scripts/gpu-wheels.sh" "$WHEELS" || exit 1
  fi
else
  DEVICE=cuda
  SMALL=
  : "${WHEELS:?set WHEELS to the folder scripts/gpu-wheels.sh filled}"
fi

SITE=$WORK/site
install_from_wheels() {
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl || return 1
  # beside the node's torch and triton, never replacing them
  for pkg in torch triton numpy; do
    if [ -e "$SITE/$pkg" ]; then echo "the wheel folder carries $pkg: it would shadow the node's own"; return 1; fi
  done
}
export -f install_from_wheels
export PY WHEELS SITE
step install 20 bash -c install_from_wheels || { echo "install failed"; exit 1; }
export PYTHONPATH=$SITE
export PYTHONUNBUFFERED=1
cd "$WORK"   # from here on nothing is read from the checkout but the steps script
STEPS="$REPO/scripts/gpu_check_steps.py"
TIK=("$PY" -m tik_agent)

step environment 30 "$PY" "$STEPS" env "$OUT"
# What the node lacks must come from the wheels (in the rehearsal the interpreter has them too).
"$PY" -c "
import importlib
for name in ('tik_agent', 'openai', 'anthropic', 'git', 'gitdb', 'smmap'):
    where = importlib.import_module(name).__file__
    assert where.startswith('$SITE'), f'{name} from {where}'" \
  || { echo "a package does not come from the wheels"; FAILED=$((FAILED + 1)); FAILED_STEPS="$FAILED_STEPS imports"; }
if [ -n "$TARGET" ]; then
  # one step per check step, all at once up to the cores; the limit is the whole replay's
  # COMPILE_STEPS="kernels probes ..." replays only those (CI: the kernels table alone)
  step compile 600 "$PY" "$STEPS" compile "$OUT" --target "$TARGET" ${COMPILE_STEPS:+--steps $COMPILE_STEPS}
  { echo "## steps (compile-only rehearsal for $TARGET, $(date -u +%FT%TZ))"; cat "$WORK/steps.tmp"; } >> "$OUT/summary.md"
  rm -f "$WORK/steps.tmp"
  echo "gpu-check: results in $OUT: $(ls "$OUT" | tr '\n' ' ')"
  exit $(( FAILED > 0 ))
fi
"$PY" "$STEPS" seeds "$WORK/seeds" $SMALL || { echo "gpu-check: copying the seeds failed"; exit 1; }
# One Triton cache for the node, a folder for each step that reads it (cache_part in
# compile_rehearsal.py): an evaluation's workers copy their seed's part only.  The interpreter
# compiles nothing: the rehearsal's stays empty, and its evaluations still copy it in.
CACHE=$WORK/triton-cache
mkdir -p "$CACHE"
[ "$REHEARSE" = 1 ] || timed warm "$PY" "$STEPS" warm "$CACHE" "$OUT"
mkdir -p "$CACHE"/probes "$CACHE"/eval-{rmsnorm,add_rmsnorm,logprobs,matmul,attention}
timed probes env TRITON_CACHE_DIR="$CACHE/probes" "$PY" "$STEPS" probes "$WORK/seeds" "$OUT" $SMALL

# --graphs: on the GPU the default (CUDA-graph replay decides); in the rehearsal the eager
# stand-in runs the same phase (slots, refills, per-replay checks) on the interpreter.
# A seed timed against itself measures; it does not compete.  Under load (CI runs another lane
# beside this one) one cell can come out "slower" beyond the noise: the step still passes, and
# the table and the log show it.  Every other outcome but passed fails the step.
eval_self() {
  local seed=$1 json=$WORK/eval-$1.json
  "$PY" -m tik_agent eval "$WORK/seeds/$seed/kernel.py" --seed "$WORK/seeds/$seed" \
    --device "$DEVICE" --rounds 5 --graphs --warm-cache "$CACHE/eval-$seed" --json > "$json"
  local rc=$?
  if [ $rc = 1 ] && "$PY" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["outcome"] != "slower")' "$json"; then
    echo "eval-$seed: the seed against itself came out slower: timer noise, not a failed check"
    return 0
  fi
  return $rc
}
export -f eval_self
export WORK DEVICE CACHE
# Every bundled seed; attention's grid of sequences (invariance launches per case, its survey's
# boundary cases) costs about twice a row seed's.
for seed in rmsnorm add_rmsnorm logprobs matmul attention; do
  timed "eval-$seed" bash -c 'eval_self "$1"' _ "$seed"
done
"$PY" "$STEPS" summarise "$OUT" --evals "$WORK"

timed optimize "${TIK[@]}" optimize "$WORK/seeds/rmsnorm" --agent offline --iterations 3 --device "$DEVICE" \
  --rounds 3 --warm-cache "$CACHE/eval-rmsnorm" --run-dir "$WORK/run" > "$OUT/optimize.txt" 2>&1
"${TIK[@]}" lineage "$WORK/run" >> "$OUT/optimize.txt" 2>&1
timed export bash -c '"$0" -m tik_agent export "$1" --out "$2" && "$0" "$3" wheel "$1" "$2" "$4" --site "$5"' \
  "$PY" "$WORK/run" "$WORK/dist" "$STEPS" "$OUT" "$WORK/exported-site"

{ echo "## steps ($( [ $REHEARSE = 1 ] && echo "rehearsal on the CPU" || echo "$DEVICE" ), $(date -u +%FT%TZ))"; cat "$WORK/steps.tmp"; } >> "$OUT/summary.md"
rm -f "$WORK/steps.tmp"
echo "gpu-check: results in $OUT: $(ls "$OUT" | tr '\n' ' ')"
echo "gpu-check: $(grep -c ': exit 0,' "$OUT/summary.md") passed, $FAILED failed${FAILED_STEPS:+:$FAILED_STEPS}"
# A step whose output went to a result file: its end, here, where CI's log shows it.
case $FAILED_STEPS in *optimize*) echo "== the end of optimize.txt:"; tail -n 30 "$OUT/optimize.txt" ;; esac
exit $(( FAILED > 0 ))
