#!/bin/sh
# The OpInfo sweep with CUDA samples (issue #22), for the GPU machine: float32, float16 and bfloat16,
# all samples, both backends; run from anywhere in the repository with the build's framefuse on
# PYTHONPATH (default: python/ and the root). Writes $OUT/opinfo-cuda.md and $OUT/opinfo-cuda.jsonl
# (OUT defaults to the current directory).
#
# The sweep is bound by the CPU (one torch thread a process): JOBS processes (default 8) each take
# every JOBS-th op_db entry on the same GPU and --merge writes one report. About 49,000 samples on
# torch 2.11 (98,000 items with both backends), so MAX_SECONDS (default 480) cuts each part and the
# report says where. Extra arguments go to opinfo_sweep.py (--ops add,sin; --dtypes float16).
set -eu
cd "$(dirname "$0")/../.."
OUT=${OUT:-.}
JOBS=${JOBS:-8}
PARTS=$(mktemp -d)
export PYTHONPATH="${PYTHONPATH:-$PWD/python:$PWD}"
k=0
pids=
list=
while [ "$k" -lt "$JOBS" ]; do
    python3 tests/python/opinfo_sweep.py --device cuda --full --dtypes float32,float16,bfloat16 \
        --max-seconds "${MAX_SECONDS:-480}" --shard "$k/$JOBS" --jsonl "$PARTS/part$k.jsonl" "$@" \
        >/dev/null 2>"$PARTS/part$k.log" &
    pids="$pids $!"
    list="$list${list:+,}$PARTS/part$k.jsonl"
    k=$((k + 1))
done
status=0
for pid in $pids; do
    wait "$pid" || status=$?
done
python3 tests/python/opinfo_sweep.py --merge "$list" --report "$OUT/opinfo-cuda.md" >/dev/null
cat "$PARTS"/part*.jsonl >"$OUT/opinfo-cuda.jsonl"
[ "$status" -eq 0 ] || tail -n 5 "$PARTS"/part*.log
sed -n '1,/^First compiled call/p' "$OUT/opinfo-cuda.md"
rm -rf "$PARTS"
exit "$status"
