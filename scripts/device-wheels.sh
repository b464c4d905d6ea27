#!/usr/bin/env bash
# Fills .whl (git-ignored) with what `pip install --no-index --find-links .whl deepspeed` needs on the GPU
# machine, which reaches no package registry and does not get ../shared (only the checkout travels):
# the wheels of ../shared/device/wheels, DeepSpeed itself built here as a pure-Python wheel (no compiled
# ops: DS_BUILD_OPS=0; it finds its accelerator at run time), and the pure-Python requirements the
# device's PyTorch venv may lack. Run here (scripts/device-pack.sh calls it); carry [".whl"].
# usage: scripts/device-wheels.sh [OUTDIR]   (default .whl)
set -euo pipefail
cd "$(dirname "$0")/.."
outdir=${1:-.whl}
shared=../shared/device/wheels
[ -d "$shared" ] || { echo "device-wheels: $shared not found (shared/ beside the checkout)" >&2; exit 2; }
sdist=$(find "$shared" -maxdepth 1 -name 'deepspeed-*.tar.gz' | head -n 1)
[ -n "$sdist" ] || { echo "device-wheels: no deepspeed-*.tar.gz in $shared" >&2; exit 2; }
mkdir -p "$outdir"
cp "$shared"/*.whl "$outdir"/
python3 -m pip --version >/dev/null 2>&1 || { echo "device-wheels: python3 has no pip" >&2; exit 2; }
python3 -c 'import wheel' 2>/dev/null || python3 -m pip install -q wheel
if ! ls "$outdir"/deepspeed-*.whl >/dev/null 2>&1; then
  DS_BUILD_OPS=0 python3 -m pip wheel -q --no-deps --no-build-isolation "$sdist" -w "$outdir"
fi
# DeepSpeed's requirements beyond the shared wheels and torch; numpy too, should the venv lack it.
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
  --no-deps -d "$outdir" tqdm packaging numpy nvidia-ml-py setuptools wheel
echo "device-wheels: $(find "$outdir" -name '*.whl' | wc -l) wheels, $(du -sm "$outdir" | cut -f1) MiB in $outdir"
