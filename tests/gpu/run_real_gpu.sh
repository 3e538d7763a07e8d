#!/usr/bin/env bash
# The GPU suite and GPU benchmarks on a machine with a real GPU, inside a time budget.
#
#   OUT=DIR [BUDGET_S=560] [PY=python3] bash tests/gpu/run_real_gpu.sh
#
# Runs, in this order and each under its own limit (what is left of BUDGET_S):
#   1. tests/gpu at one rank, split over JOBS (default 7) parallel pytest processes (one
#      CUDA context each; Numba compiles kernels per process, so a serial run is mostly
#      compiling);
#      at the same time the MPI-marked tests/gpu under `mpievo launch -n 2` (2 ranks
#      sharing the GPU);
#   2. `mpievo bench genomes --device cuda` at -n 2 (GENOME_DIMS, default 1e7,1e8,1e9);
#   3. `mpievo bench gpu` at -n 2;
#   4. the MPI-marked tests/gpu at -n 4.
# A test stage fails if the GPU backend is not the real GPU (nothing may skip for want
# of one). Logs and results go to OUT; SUMMARY lines say what passed. Exit status:
# non-zero when a stage failed or ran out of time.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
OUT=${OUT:?set OUT to a folder for logs and results}
BUDGET_S=${BUDGET_S:-560}
GENOME_DIMS=${GENOME_DIMS:-1e7,1e8,1e9}
GPU_ARGS=${GPU_ARGS:-}
EXPECT_BACKEND=${EXPECT_BACKEND:-gpu}  # the CUDA simulator (simulator) to try this script without a GPU
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# tests only: a communicator timeout polls instead of blocking, which slows small calls
# in the benchmarks (docs/guides/collectives.md, "Timeouts")
TESTS=(env "MPIEVO_COMM_TIMEOUT=${MPIEVO_COMM_TIMEOUT:-120}")
BENCH=(env -u MPIEVO_COMM_TIMEOUT)
MPIEVO=("$PY" -m mpievo)
failed=()

left() { echo $((BUDGET_S - SECONDS)); }
limit() { local want=$1 l; l=$(left); [ "$l" -lt "$want" ] && want=$l; echo $((want > 0 ? want : 1)); }
summary() { echo "SUMMARY $*" | tee -a "$OUT/summary.txt"; }

finish() {  # finish NAME RC SECONDS LOG: record the outcome of a stage
    local name=$1 rc=$2 secs=$3 log=$4 tail
    tail=$(grep -a -E ' (passed|failed|error)' "$log" 2>/dev/null | tail -1 | tr -d '=')
    if [ "$rc" -ne 0 ]; then failed+=("$name"); fi
    summary "$name: exit $rc in ${secs}s: ${tail:-no pytest summary}"
}

finish_tests() {  # finish_tests NAME RC SECONDS LOG: finish, failing unless the pytest header names the real GPU
    local rc=$2
    if ! grep -a -q "tests/gpu backend: $EXPECT_BACKEND" "$4"; then
        rc=97
        echo "backend is not the GPU" >>"$4"
    fi
    finish "$1" $rc "$3" "$4"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1
"$PY" - >>"$OUT/gpu.txt" 2>&1 <<'EOF'
import numpy, numba, numba_cuda, mpi4py, h5py
from numba import cuda
print("numpy", numpy.__version__, "numba", numba.__version__, "numba-cuda", numba_cuda.__version__,
      "mpi4py", mpi4py.__version__, "h5py", h5py.__version__)
try:
    import cupy
    print("cupy", cupy.__version__)
except ImportError:
    print("cupy: none")
print("cuda available", cuda.is_available(), getattr(cuda.get_current_device(), "name", "(the simulator)"))
EOF
cat "$OUT/gpu.txt"

# 1. tests/gpu: one rank in JOBS parallel groups (files dealt out largest first), and -n 2 beside them
JOBS=${JOBS:-7}
groups=()
i=0
for f in $(ls -S tests/gpu/test_*.py); do
    groups[i % JOBS]="${groups[i % JOBS]:-}$f "
    i=$((i + 1))
done
start=$SECONDS
lim=$(limit 300)
pids=()
for i in "${!groups[@]}"; do
    "${TESTS[@]}" timeout -k 10 "$lim" "$PY" -m pytest -p no:randomly -p no:cacheprovider --with-mpi --timeout=240 -rs \
        ${groups[$i]} >"$OUT/serial-$i.log" 2>&1 &
    pids+=($!)
done
"${TESTS[@]}" timeout -k 10 "$lim" "${MPIEVO[@]}" launch -n 2 -- python -m pytest -p no:randomly -p no:cacheprovider \
    --only-mpi --timeout=240 -rs tests/gpu >"$OUT/mpi2.log" 2>&1 &
mpi_pid=$!
for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    finish_tests "tests/gpu 1 rank [${groups[$i]}]" $? $((SECONDS - start)) "$OUT/serial-$i.log"
done
wait $mpi_pid
finish_tests "tests/gpu -n 2 (MPI-marked)" $? $((SECONDS - start)) "$OUT/mpi2.log"

# 2. encodings on the GPU, up to 1e9 genes
start=$SECONDS
"${BENCH[@]}" timeout -k 10 "$(limit 200)" "${MPIEVO[@]}" launch -n 2 -- mpievo bench genomes --device cuda \
    --dims "$GENOME_DIMS" --out "$OUT/genomes" >"$OUT/genomes.log" 2>&1
finish "bench genomes --device cuda --dims $GENOME_DIMS" $? $((SECONDS - start)) "$OUT/genomes.log"

# 3. kernels, device collectives, device islands and breeding
start=$SECONDS
"${BENCH[@]}" timeout -k 10 "$(limit 150)" "${MPIEVO[@]}" launch -n 2 -- mpievo bench gpu $GPU_ARGS \
    --json "$OUT/gpu.json" >"$OUT/bench-gpu.log" 2>&1
finish "bench gpu" $? $((SECONDS - start)) "$OUT/bench-gpu.log"

# 4. four ranks sharing the GPU
start=$SECONDS
"${TESTS[@]}" timeout -k 10 "$(limit 150)" "${MPIEVO[@]}" launch -n 4 -- python -m pytest -p no:randomly \
    -p no:cacheprovider --only-mpi --timeout=120 -rs tests/gpu >"$OUT/mpi4.log" 2>&1
finish_tests "tests/gpu -n 4 (MPI-marked)" $? $((SECONDS - start)) "$OUT/mpi4.log"

if [ ${#failed[@]} -gt 0 ]; then
    summary "FAILED: ${failed[*]}"
    exit 1
fi
summary "all stages passed in ${SECONDS}s"
