#!/bin/bash
# tracekern: the suite's cuda/cublas/cufft cases on a real GPU, then bench.cuda --quick if time remains.
# Run from the repository root: bash bench/device/run.sh   (wheels in .whl/, optional ones in .whl/opt/: bench/device/wheels.txt)
T0=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=${PY:-python3}; export WHL=${WHL:-.whl}; SITE=${SITE:-/tmp/site}   # (overridable for a dry run elsewhere)
V="$OUT/versions.txt"

# What the device already has (decides which optional wheels go in).
$PY - > "$OUT/device_pkgs.txt" 2>&1 <<'EOF'
import importlib.metadata as m
for n in ["numpy", "numba", "llvmlite", "numba-cuda", "cuda-bindings", "cuda-core", "cuda-pathfinder", "nvmath-python",
          "nvidia-cublas", "nvidia-cufft", "nvidia-cuda-nvrtc", "nvidia-nvjitlink", "nvidia-nvvm", "nvidia-cuda-nvcc",
          "nvidia-cuda-runtime", "cuda-toolkit", "scipy", "pytest", "pytest-xdist", "execnet", "hypothesis",
          "threadpoolctl", "pytest-timeout", "rocket-fft", "packaging", "jax", "torch"]:
    try:
        print(n, m.version(n))
    except m.PackageNotFoundError:
        print(n, "-")
EOF
cat "$OUT/device_pkgs.txt"

OPT=$($PY - <<'EOF'
import glob, importlib.metadata as m, os, re
def Version(v):
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])
def ver(n):
    try:
        return Version(m.version(n))
    except Exception:
        return None
W = os.environ.get("WHL", ".whl")
pick = []
llvm, nb = ver("llvmlite"), ver("numba")
if llvm is not None and Version("0.50") <= llvm < Version("0.51") and not (nb is not None and Version("0.68") <= nb < Version("0.69")):
    pick += glob.glob(W + "/opt/numba-*.whl")
b, c, p = ver("cuda-bindings"), ver("cuda-core"), ver("cuda-pathfinder")
ok = (b is not None and Version("13") <= b < Version("14") and c is not None and Version("0.5.1") <= c < Version("2")
      and p is not None and Version("1.5.1") <= p < Version("2"))
if not ok:
    pick += glob.glob(W + "/opt/cuda_*.whl")
print(" ".join(pick))
EOF
)
echo "optional wheels picked: ${OPT:-none}"
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHL"/*.whl $OPT || { echo "pip install failed"; exit 3; }
# /tmp/site is on PYTHONPATH, not a site dir: its .pth files (numba-cuda's numba.cuda redirector) would not
# run. A sitecustomize there makes it one.
printf 'import site\nsite.addsitedir("%s")\n' "$SITE" > "$SITE/sitecustomize.py"
export PYTHONPATH=$SITE:$PWD
if [ -z "$CUDA_HOME" ] && [ -z "$CUDA_PATH" ] && ! $PY -c "import importlib.metadata as m; m.version('nvidia-nvvm')" 2>/dev/null; then
    NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
    [ -n "$NVCC" ] && export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
fi
export NUMBA_ENABLE_CUDASIM=${SIM:-0} PYTHONUNBUFFERED=1
{
    echo "CUDA_HOME=$CUDA_HOME"; nvidia-smi -L; nvcc --version 2>&1 | tail -2
    $PY - <<'EOF'
import importlib.metadata as m, sys
print("python", sys.version.split()[0])
import numpy, numba, llvmlite
print("numpy", numpy.__version__, numpy.__file__)
print("numba", numba.__version__, "llvmlite", llvmlite.__version__)
import numba_cuda
print("numba_cuda", m.version("numba-cuda"), numba_cuda.__file__)
import numba.cuda
print("numba.cuda from", numba.cuda.__file__)
for n in ["cuda-bindings", "cuda-core", "cuda-pathfinder", "nvmath-python", "rocket-fft"]:
    print(n, m.version(n))
from numba import cuda
print("cuda available", cuda.is_available())
d = cuda.get_current_device(); print("device", getattr(d, "name", d), getattr(d, "compute_capability", "?"))
try:
    from numba.cuda.cuda_paths import get_cuda_paths
    for k, v in get_cuda_paths().items():
        print("path", k, v)
except Exception as e:
    print("cuda paths:", type(e).__name__, e)
import tracekern as tk
from tracekern.backends.cuda import launch_config
print("launch", launch_config())
import numpy as np
print("smoke", tk.jit(lambda x: np.sum(x * 2), backend="cuda")(np.ones(1000, np.float32)).copy_to_host())
EOF
} 2>&1 | tee "$V"
echo "setup took $(( $(date +%s) - T0 )) s"
[ -n "$STOP_AFTER_SETUP" ] && exit 0

TO=""
$PY -c "import pytest_timeout" 2>/dev/null && TO="--timeout=240"
T1=$(date +%s)
timeout 330 $PY -m pytest -q -n 12 -p no:cacheprovider -o addopts="" -ra --maxfail=40 $TO --durations=20 \
    --junitxml="$OUT/junit.xml" -k "cuda or cublas or cufft" tests/ > "$OUT/tests.log" 2>&1
RC=$?
tail -c 9000 "$OUT/tests.log"
echo "pytest rc=$RC, took $(( $(date +%s) - T1 )) s"

LEFT=$(( 500 - ($(date +%s) - T0) ))
if [ $LEFT -ge 60 ]; then
    B=$(( LEFT < 120 ? LEFT : 120 ))
    T2=$(date +%s)
    timeout $B $PY -m bench.cuda --quick --json "$OUT/cuda-quick.json" > "$OUT/bench.log" 2>&1
    echo "bench rc=$?, took $(( $(date +%s) - T2 )) s (limit $B)"
    tail -c 2500 "$OUT/bench.log"
else
    echo "bench skipped: $LEFT s left"
fi
echo "total $(( $(date +%s) - T0 )) s"
