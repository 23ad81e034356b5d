#!/usr/bin/env bash
# The device check, for a bare GPU machine: Python 3.12, numpy, mpmath, hypothesis, pytest and
# CUDA 13, but no PyCUDA and no network.  Needs vendor/ (scripts/fetch_vendor.sh, run online).
#
#   1. builds PyCUDA from the carried sdist (in parallel; without curand if its headers are
#      missing) and installs normcheck with the carried wheels;
#   2. runs the gpu tests, the CPU/GPU agreement (--fmad=false bit for bit, --fmad=true listed),
#      the bandwidth benchmark (65536 x 4096 bf16) and a --quick report on the cuda backend;
#   3. writes everything under $OUT (default ./out); a failed step is logged, the others run.
# About 8 minutes on an H200 with 16 cores.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
status=0
step() { echo; echo "== $* ($(date +%T))"; }
run() { "$@"; local rc=$?; [ $rc -eq 0 ] || { echo "!! failed ($rc): $*"; status=1; }; }
runlog() {  # runlog FILE CMD...: run, keep the output in FILE too
  local f=$1; shift
  "$@" 2>&1 | tee "$f"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "!! failed ($rc): $*"; status=1; }
}

step "machine"
nvidia-smi | tee "$OUT/nvidia-smi.txt"
NVCC=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
CUDA_ROOT=${CUDA_ROOT:-$(dirname "$(dirname "$NVCC")")}
export PATH="$CUDA_ROOT/bin:$PATH" NORMCHECK_CUDA_INCLUDE="$CUDA_ROOT/include"
export NORMCHECK_CACHE="$PWD/build/normcheck-cache"
python3 --version; "$NVCC" --version | tail -2
JOBS=$(nproc)

step "python environment (offline, system numpy/mpmath/hypothesis/pytest kept)"
python3 -m venv --system-site-packages build/gpuvenv
. build/gpuvenv/bin/activate
PIP="python -m pip install --no-index --find-links vendor"
run $PIP setuptools wheel
run $PIP pytools platformdirs mako markupsafe typing_extensions ml_dtypes matplotlib

step "PyCUDA from its sdist"
if python -c "import pycuda.driver" 2>/dev/null; then
  echo "PyCUDA already installed"
else
  rm -rf build/pycuda && mkdir -p build/pycuda
  tar xzf vendor/pycuda-*.tar.gz -C build/pycuda --strip-components=1
  curand=""
  [ -f "$CUDA_ROOT/include/curand.h" ] || { curand="--no-cuda-enable-curand"; echo "no curand headers: building without curand"; }
  pushd build/pycuda >/dev/null
  run python configure.py --cuda-root="$CUDA_ROOT" $curand
  run python setup.py build_ext -j "$JOBS"
  run python -m pip install --no-build-isolation --no-index --no-deps .
  popd >/dev/null
fi
python -c "import pycuda.driver as d; d.init(); print('PyCUDA', d.get_version(), d.Device(0).name())"

step "normcheck"
run python -m pip install --no-build-isolation --no-index --no-deps -e .
python -c "from normcheck.backends import cuda; print('cuda backend:', cuda.unavailable_reason() or 'usable')"

step "gpu tests"
runlog "$OUT/gpu_tests.txt" python -m pytest -q -rs -m gpu tests/ -p no:cacheprovider
step "kernels compile with nvcc for this GPU"
runlog "$OUT/nvcc_compile.txt" python -m pytest -q tests/test_kernels.py -k nvcc -p no:cacheprovider

step "agreement, --fmad=false (bit for bit but rsqrtf)"
runlog "$OUT/agree_fmad_false.txt" normcheck agree
step "agreement, --fmad=true (differences in ulp)"
runlog "$OUT/agree_fmad_true.txt" normcheck agree --fmad

step "bandwidth, 65536 x 4096 bf16"
runlog "$OUT/bandwidth.txt" normcheck bench gpu

step "quick report on cuda"
runlog "$OUT/report_cuda.txt" normcheck report --quick --backend cuda --out "$OUT/report_cuda"

step "property suite on cuda (ci profile)"
runlog "$OUT/properties_cuda.txt" python -m pytest -q properties --normcheck-backend cuda -p no:cacheprovider -x

step "done: status $status"
exit $status
