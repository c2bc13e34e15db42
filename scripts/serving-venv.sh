#!/usr/bin/env bash
# Build a venv of its own holding a serving engine, for the plugin tests
# (tests/test_serving_plugins.py) and for trying an exported wheel's plugin by hand.
# The engines pin their own CUDA build of torch (several GB): it goes into this venv,
# never into the project's .venv.
#
#   bash scripts/serving-venv.sh vllm   [DIR]   # default DIR: .venv-vllm   (vllm==0.33.0)
#   bash scripts/serving-venv.sh sglang [DIR]   # default DIR: .venv-sglang (sglang==0.5.23)
#
# The tests find the venvs at TIK_VLLM_VENV and TIK_SGLANG_VENV (defaults as above) and
# skip, saying so, where there is none.  Measured on the 2-core machine on 2026-12-02:
# the vLLM venv took 19 minutes to install (9.4 GB), the SGLang venv 18 minutes (11 GB).
set -euo pipefail
ENGINE=${1:?usage: serving-venv.sh vllm|sglang [DIR]}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
case "$ENGINE" in
  vllm) SPEC=${VLLM_SPEC:-vllm==0.33.0} ;;
  sglang) SPEC=${SGLANG_SPEC:-sglang==0.5.23} ;;
  *) echo "serving-venv.sh: unknown engine '$ENGINE' (vllm or sglang)" >&2; exit 2 ;;
esac
DIR=${2:-$REPO/.venv-$ENGINE}
if [ -e "$DIR" ] && [ ! -x "$DIR/bin/python" ]; then
  echo "serving-venv.sh: $DIR exists and is not a venv; choose another DIR" >&2
  exit 2
fi
[ -x "$DIR/bin/python" ] || "$PY" -m venv "$DIR"
echo "installing $SPEC into $DIR (its own torch; several GB)"
"$DIR/bin/python" -m pip install -q "$SPEC"
"$DIR/bin/python" -c "import importlib.metadata as m; print('$ENGINE', m.version('$ENGINE'), 'torch', m.version('torch'))"
