#!/usr/bin/env bash
# One prepared run on a lent many-core machine with a GPU (issue 18): the equal-budget tuning of claim 4
# (`brownformer tune`, CPU worker processes: the same numbers as on a laptop's CPU, only sooner), the side-by-side
# kfac-pytorch anchor (benchmarks/kfac_anchor.py, CPU workers) and, beside them on the GPU, the CUDA tests and the
# per-step optimizer cost on CUDA. Everything it writes goes into one archive, OUT_DIR/device_results.tar.gz, plus
# OUT_DIR/device_summary.md.
#
#   bash scripts/device_tune.sh [OUT_DIR]     # OUT_DIR defaults to $OUT, else results/device
#   DEVICE_TASKS="stability gpu" bash scripts/device_tune.sh   # a subset (the K-FAC stability sweep, CUDA tests)
#
# Carried beside the working tree in .device/ (ignored by git): whl/ (wheels of jsonschema, its dependencies and
# tabulate, which the GPU image lacks) and kfac-pytorch/ (the fetched gpauloski/kfac-pytorch, for the anchor only;
# never a dependency of the project). Smoke test on a laptop (checks that the steps run, not the numbers):
#   DEVICE_BUDGET_S=60 TUNE_TRIALS=1 ANCHOR_SEEDS="0" TUNE_WORKERS=1 ANCHOR_WORKERS=1 bash scripts/device_tune.sh /tmp/dev
set -uo pipefail

OUT_DIR="${1:-${OUT:-results/device}}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
PY="${PYTHON:-python3}"
BUDGET="${DEVICE_BUDGET_S:-480}"          # wall seconds for the tuning and the anchor (the call's limit is 600)
TUNE_WORKERS="${TUNE_WORKERS:-8}"         # one per (model, optimizer) pair: 2 models x 4 optimizers
ANCHOR_WORKERS="${ANCHOR_WORKERS:-6}"
TUNE_TRIALS="${TUNE_TRIALS:-9}"
ANCHOR_SEEDS="${ANCHOR_SEEDS:-0 1 2}"
STABILITY_WORKERS="${STABILITY_WORKERS:-14}"
TASKS="${DEVICE_TASKS:-tune anchor gpu overhead}"  # any of: tune anchor stability gpu overhead
RES="$(mktemp -d "${TMPDIR:-/tmp}/device.XXXXXX")"
LOG="$RES/device.log"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec > >(tee -a "$LOG") 2>&1

pack() {
    cp "$LOG" "$OUT_DIR/device.log" 2>/dev/null
    tar -czf "$OUT_DIR/device_results.tar.gz" -C "$RES" --exclude ./site --exclude ./data . 2>/dev/null
    {
        echo "# Device run $(date -u +%Y-%m-%dT%H:%MZ)"; echo
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"
        "$PY" -c 'import torch, sys, os; print("python", sys.version.split()[0], "| torch", torch.__version__, "| cuda", torch.version.cuda, "| cores", os.cpu_count())' 2>/dev/null
        for f in "$RES"/*.status; do [[ -f $f ]] && cat "$f"; done
    } > "$OUT_DIR/device_summary.md"
}
trap pack EXIT

# step NAME LIMIT CMD...: runs CMD under `timeout LIMIT`, records its status and wall seconds.
step() {
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS rc=0
    timeout --kill-after=10 "$limit" "$@" > "$RES/$name.log" 2>&1 || rc=$?
    echo "- $name: rc $rc, $((SECONDS - t0)) s" > "$RES/$name.status"
    echo "[$(date -u +%T)] $name finished: rc $rc"
}

SITE="$RES/site"
if ! "$PY" -c 'import jsonschema, tabulate' 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .device/whl/*.whl || exit 2
fi
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --target "$SITE" .device/kfac-pytorch \
    || echo "kfac-pytorch did not install: the anchor will fail"
export PYTHONPATH="$SITE:$PWD/src"
"$PY" -c 'import brownformer.config, brownformer.tuning, kfac; print("imports ok")' || exit 2
"$PY" -m brownformer.cli data --config config/config.yaml --dataset digits --out "$RES/data/digits" > "$RES/data.log" 2>&1 \
    || { echo "data preparation failed"; cat "$RES/data.log"; exit 2; }

has() { [[ " $TASKS " == *" $1 "* ]]; }
echo "[$(date -u +%T)] start: $TASKS"
PIDS=()
if has tune; then
    step tune "$BUDGET" "$PY" -m brownformer.cli tune --config config/config.yaml --set "tuning.trials=$TUNE_TRIALS" \
        --optimizers sgd adamw muon kfac-iterative --workers "$TUNE_WORKERS" --data-root "$RES/data" \
        --log "$RES/tune_progress.log" --out "$RES/tuned.yaml" --table "$RES/tuning.md" &
    PIDS+=($!)
fi
if has anchor; then
    # shellcheck disable=SC2086
    step anchor "$BUDGET" "$PY" benchmarks/kfac_anchor.py --seeds $ANCHOR_SEEDS --kfac-lrs 0.01 0.03 0.1 \
        --dampings 0.001 0.01 --adamw-lrs 0.0015 0.003 0.006 0.009 0.018 0.036 --workers "$ANCHOR_WORKERS" \
        --data-root "$RES/data" --out "$RES/kfac_anchor.md" &
    PIDS+=($!)
fi
if has stability; then  # issue 18: 0 non-finite runs over 5 seeds x lr {1/3, 1, 3} x tuned, on the ViTs
    step stability "$BUDGET" "$PY" benchmarks/stability_sweep.py --config config/config.yaml \
        --models vit-pre vit-post --optimizers kfac-iterative --workers "$STABILITY_WORKERS" \
        --data-root "$RES/data" --out "$RES" &
    PIDS+=($!)
fi
if has gpu && "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    step gpu_tests 150 "$PY" -m pytest -q -p no:cacheprovider -rs tests/test_gpu.py tests/test_precision.py \
        tests/data/test_device.py tests/train/test_sync_free.py
    if has overhead; then
        step overhead_cuda 150 "$PY" benchmarks/optimizer_overhead.py --device cuda --repeats 3 \
            --out "$RES/optimizer_overhead_cuda.json"
    fi
fi
wait "${PIDS[@]}"  # not a bare `wait`: it would also wait for the log's tee, which never ends
echo "[$(date -u +%T)] done"
