#!/usr/bin/env bash
# Fetch, while online, what scripts/gpu_check.sh needs on an offline GPU machine
# (x86-64, Python 3.12): the PyCUDA sdist and the wheels of what normcheck needs beyond the
# machine's numpy/mpmath/hypothesis/pytest.  Everything goes to vendor/ (ignored by git; carry
# it to the device).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p vendor
# the sdist itself (pip download would build numpy from source to read its metadata)
python3 - <<'PY'
import json, urllib.request
info = json.load(urllib.request.urlopen("https://pypi.org/pypi/pycuda/json"))
files = info["releases"].get("2026.1") or info["urls"]  # CUDA 13 needs pycuda >= 2026.1
sdist = [u for u in files if u["packagetype"] == "sdist"][0]
urllib.request.urlretrieve(sdist["url"], "vendor/" + sdist["filename"])
print("fetched", sdist["filename"])
PY
python3 -m pip download --quiet -d vendor --only-binary :all: --implementation cp \
  --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 \
  setuptools wheel pytools platformdirs mako markupsafe typing_extensions ml_dtypes matplotlib
rm -f vendor/numpy-*.whl   # the GPU machine has numpy
ls -la vendor
du -sh vendor
