#!/usr/bin/env bash
# The GPU checks, in one script for a machine with one CUDA GPU (docs/gpu.md says what ran).
#
#   OUT=outputs/gpu-check BUDGET_S=390 bash scripts/gpu/check.sh
#
# Run from the repository root with python3 holding torch (CUDA), numpy, pandas, tqdm; no
# ipyparallel or pydantic needed. Stages, most important first, each under `timeout` and all
# within BUDGET_S seconds (a stage that would not fit is skipped and says so):
#   1. nvidia-smi, versions
#   2. replay measure, batch 32, cifar + imagenet, 7 models: (a) fp32 eager, (b) bf16 + channels-last
#   3. python -m ddlstudy.cli.torchrun on the GPU: allreduce and ddp (1 rank: an NCCL group of
#      size 1), ps_sync (1 worker + 1 server: 2 ranks on one GPU)
#   4. the collectives bench on 1 rank (scripts/gpu/collectives_spmd.py)
#   5. (c) bf16 + channels-last + torch.compile, resnet50 at both shapes
#   6. batch 64 of (a) and (b); then (c) for more models while time is left
# Writes under $OUT: log.txt (everything), the replay tables (h100-*.csv) and runs.tgz (the
# train records, the collectives table, nvidia-smi's output). ONLY=REGEX runs only the stages
# whose name matches (e.g. ONLY='ddp|collectives' to rerun those).
set -o pipefail
OUT=${OUT:-outputs/gpu-check}
BUDGET_S=${BUDGET_S:-390}
PY=${PYTHON:-python3}
STEPS=${STEPS:-15}
WARMUP=${WARMUP:-5}
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu MODELS=mlp ... : a smoke test of the script itself
MODELS=${MODELS:-alexnet,vgg16,vgg19,resnet18,resnet50,resnet152,googlenet}
COMPILE=${COMPILE:-resnet50}
COMPILE_MORE=${COMPILE_MORE:-resnet18,googlenet,resnet152}
TRAIN_MODEL=${TRAIN_MODEL:-resnet18}
COLL_MAX=${COLL_MAX:-16777216}
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-lib}
mkdir -p "$OUT/runs"
LOG=$OUT/log.txt
T0=$SECONDS

log() { echo "== +$((SECONDS - T0))s $(date -u +%FT%TZ) $*" | tee -a "$LOG"; }

# stage LIMIT_S NAME CMD...: run CMD under timeout min(LIMIT_S, what the budget has left)
stage() {
    local limit=$1 name=$2; shift 2
    if [ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]]; then return 0; fi
    local left=$((BUDGET_S - (SECONDS - T0)))
    if [ "$left" -lt 20 ]; then log "SKIP $name: budget spent ($left s left)"; return 0; fi
    [ "$limit" -gt "$left" ] && limit=$left
    log "START $name (limit ${limit}s): $*"
    timeout --kill-after=5 "$limit" bash -c '"$@"' "$name" "$@" 2>&1 | tee -a "$LOG"
    local rc=$?
    log "END $name rc=$rc$([ $rc = 124 ] && echo ' (timed out)')"
}

measure() {  # measure OUT_CSV BATCHES MODELS [flags]
    local out=$1 batches=$2 models=$3; shift 3
    $PY -m ddlstudy.replay measure --device "$DEVICE" --models "$models" --shapes cifar,imagenet \
        --batch-sizes "$batches" --steps "$STEPS" --warmup "$WARMUP" --out "$out" "$@"
}

train() {  # train NPROC STRATEGY [flags]
    local n=$1 strategy=$2; shift 2
    $PY -m torch.distributed.run --standalone --nproc-per-node "$n" -m ddlstudy.cli.torchrun \
        --strategy "$strategy" --model "$TRAIN_MODEL" --dataset synthetic --shape cifar --batch-size 32 \
        --warmup-steps 3 --steps 10 --device "$DEVICE" --no-progress --timeout 60 \
        --out "$OUT/runs/train-$strategy" "$@"
}

export -f measure train
export OUT PY STEPS WARMUP DEVICE TRAIN_MODEL
log "host $(hostname), budget ${BUDGET_S}s"
nvidia-smi 2>&1 | tee "$OUT/runs/nvidia-smi.txt" | tee -a "$LOG"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 \
    | tee -a "$LOG"
$PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__,
'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(),
'nccl', torch.cuda.is_available() and '.'.join(map(str, torch.cuda.nccl.version())),
torch.cuda.is_available() and torch.cuda.get_device_name(0))" 2>&1 \
    | tee -a "$LOG"

stage 110 "replay fp32 b32" measure "$OUT/h100-fp32.csv" 32 "$MODELS"
stage 110 "replay bf16+cl b32" measure "$OUT/h100-bf16-cl.csv" 32 "$MODELS" --precision bf16 \
    --channels-last
stage 60 "train allreduce 1 GPU" train 1 allreduce --workers 1
stage 60 "train ddp 1 GPU" train 1 ddp --workers 1
stage 60 "train ps_sync 1 worker + 1 server on 1 GPU" train 2 ps_sync --workers 1
stage 60 "collectives bench 1 rank" $PY -m torch.distributed.run --standalone --nproc-per-node 1 \
    scripts/gpu/collectives_spmd.py --device "$DEVICE" --maxbytes "$COLL_MAX" --out "$OUT/runs/collectives"
stage 200 "replay bf16+cl+compile resnet50 b32" measure "$OUT/h100-bf16-cl-compile.csv" 32 \
    "$COMPILE" --precision bf16 --channels-last --compile
stage 90 "replay bf16+cl+compile resnet50 b64" measure "$OUT/h100-bf16-cl-compile-b64.csv" 64 \
    "$COMPILE" --precision bf16 --channels-last --compile
stage 90 "replay fp32 b64" measure "$OUT/h100-fp32-b64.csv" 64 "$MODELS"
stage 90 "replay bf16+cl b64" measure "$OUT/h100-bf16-cl-b64.csv" 64 "$MODELS" \
    --precision bf16 --channels-last
stage 200 "replay bf16+cl+compile more models b32" measure \
    "$OUT/runs/h100-bf16-cl-compile-more.csv" 32 "$COMPILE_MORE" --precision bf16 \
    --channels-last --compile
log "done"
tar -czf "$OUT/runs.tgz" -C "$OUT" runs && rm -rf "$OUT/runs"
ls -la "$OUT" | tee -a "$LOG"
