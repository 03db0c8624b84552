#!/bin/sh
# The OpInfo sweep with CUDA samples (issue #22), for the GPU machine: float32, float16 and bfloat16,
# all samples, both backends, from the repository root with the build's framefuse on the path.
# The report and the items go to $OUT (default: the current directory). A full run may exceed one
# command's time: MAX_SECONDS (default 480) cuts it and the report says where; SHARD=K/N with
# CUDA_VISIBLE_DEVICES=K runs a part per GPU, and `opinfo_sweep.py --merge A.jsonl,B.jsonl
# --report R.md` writes the parts' report. Extra arguments go to opinfo_sweep.py (--ops, --dtypes).
set -eu
cd "$(dirname "$0")/../.."
OUT=${OUT:-.}
SHARD=${SHARD:-0/1}
NAME=opinfo-cuda$(echo "-$SHARD" | tr / - | sed 's/^-0-1$//')
PYTHONPATH=$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH} exec python3 tests/python/opinfo_sweep.py \
    --device cuda --full --dtypes float32,float16,bfloat16 --max-seconds "${MAX_SECONDS:-480}" \
    --shard "$SHARD" --report "$OUT/$NAME.md" --jsonl "$OUT/$NAME.jsonl" "$@"
