#!/usr/bin/env bash
# Fill DIR with the wheels a GPU node needs to run tik-agent beside its own torch
# and triton: tik-agent itself and what of pyproject.toml's dependencies the node
# image lacks (openai, anthropic, GitPython) with their own dependencies, for
# Python 3.12 manylinux x86_64.  Run it on a machine that reaches a package
# registry; scripts/gpu-check.sh installs from DIR with --no-index --no-deps.
#
#   bash scripts/gpu-wheels.sh DIR          # PYVER=3.11 for this machine's rehearsal
set -euo pipefail
DIR=${1:?usage: gpu-wheels.sh DIR}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
PYVER=${PYVER:-3.12}
mkdir -p "$DIR"
# Never remove a wheel this script did not put in DIR (an exported kernel, another project's):
# it lists what it made in DIR/.gpu-wheels and replaces only those; any other wheel there is
# one line and exit 2, with DIR left as it was.
MANIFEST="$DIR/.gpu-wheels"
ours=""
[ -f "$MANIFEST" ] && ours=$(cat "$MANIFEST")
foreign=""
for whl in "$DIR"/*.whl; do
  [ -e "$whl" ] || continue
  printf '%s\n' "$ours" | grep -qxF -- "$(basename "$whl")" || foreign="$foreign $(basename "$whl")"
done
if [ -n "$foreign" ]; then
  echo "gpu-wheels: $DIR holds wheels it did not make:$foreign; left as they are (give an empty or new folder)" >&2
  exit 2
fi
for whl in $ours; do rm -f -- "$DIR/$whl"; done
rm -f -- "$MANIFEST"

# What the node image already has (the device library's package list): never carried,
# since a second copy on the path would shadow the node's own.
NODE_HAS="torch triton numpy typer rich jinja2 matplotlib packaging setuptools wheel pytest click
anyio httpx httpcore h11 idna certifi sniffio typing-extensions markupsafe pygments shellingham
markdown-it-py mdurl filelock fsspec sympy networkx mpmath pyyaml requests urllib3 charset-normalizer
pillow cycler kiwisolver fonttools contourpy pyparsing python-dateutil six nvidia-ml-py tqdm"

src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
(cd "$REPO" && git ls-files -z -co --exclude-standard -- pyproject.toml README.md tik_agent seed_kernels prompts \
  | xargs -0 tar -cf -) | tar -xf - -C "$src"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DIR" "$src"

plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64)
# pyproject's dependencies less what the node has: read there, so a new one travels too.
mapfile -t wanted < <("$PY" - "$REPO/pyproject.toml" "$NODE_HAS" <<'PY'
import re, sys, tomllib
has = set(sys.argv[2].split())
for dep in tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]:
    if re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0].lower().replace("_", "-") not in has:
        print(dep)
PY
)
[ "${#wanted[@]}" -gt 0 ] || { echo "gpu-wheels: read no dependency from pyproject.toml" >&2; exit 1; }
"$PY" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp "${plat[@]}" \
  -d "$DIR" "${wanted[@]}"

for whl in "$DIR"/*.whl; do
  name=$(basename "$whl" | cut -d- -f1 | tr '[:upper:]_' '[:lower:]-')
  for have in $NODE_HAS; do
    if [ "$name" = "$have" ]; then rm -f "$whl"; fi
  done
done
(cd "$DIR" && ls -- *.whl) > "$MANIFEST"
# one version of each project, or pip refuses the whole install
dups=$(ls "$DIR" | cut -d- -f1 | sort | uniq -d)
[ -z "$dups" ] || { echo "gpu-wheels: two versions of: $dups" >&2; exit 1; }
ls "$DIR"
du -sh "$DIR" | cut -f1 | sed 's/^/gpu-wheels: total /'
