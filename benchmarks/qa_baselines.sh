#!/usr/bin/env bash
# Every baseline on the first N dev500 questions with the embedded models (hybrid index over the
# 4,858-passage pool, SmolLM2 via the local backend), then one comparison table + plot.
#   bash benchmarks/qa_baselines.sh [N] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
N=${1:-20}
OUT=${2:-runs/baselines}
DATA=../shared/data/hotpotqa/dev500.jsonl
[ -f "$OUT/index/manifest.json" ] || tandem index --dataset "$DATA" --kind hybrid --out "$OUT/index"
for m in direct naive_rag oracle ircot; do
  tandem eval qa --method "$m" --dataset "$DATA" --index "$OUT/index" --limit "$N" --out "$OUT/$m"
done
tandem report "$OUT/direct" "$OUT/naive_rag" "$OUT/oracle" "$OUT/ircot" --plot "$OUT/report.png"
