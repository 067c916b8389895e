#!/usr/bin/env bash
# The figures table of docs/methods/baselines-measured.md: every method on the first N dev500 questions under
# `--preset paper` (each paper's protocol: the DualRAG baselines read BM25 top-50 -> MiniLM bi-encoder ->
# top-10, re-answer with the answer-type prompt where DualRAG's evaluation applies it, the run's LLM as a
# calibrated judge) with the embedded models, then one table with 95 % bootstrap intervals (calls,
# tokens, seconds per question, EM/F1/acc/judge, fallback rate).
#   bash benchmarks/paper_table.sh [N] [OUT] [METHOD ...]
# R²AG needs an R²-Former checkpoint: R2FORMER=PATH (from `tandem train r2ag`); without it r2ag is skipped.
# CONCURRENCY=N (default 1) questions in flight; LLM_OPTS="engine=openvino ..." --llm-opt pairs for every run;
# DATA=FILE another question set (default dev500), INDEX=DIR an index of it with the rala extra (default:
# built at OUT/index). Runs resume where they stopped; the table ends with each method minus NativeRAG and
# DualRAG minus IRCoT (paired 95 % intervals over the questions both answered), where those runs are there.
# Each run's folder is first seeded with the judge replies of the runs before it (benchmarks/seed_judge.py).
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
N=${1:-20}
OUT=${2:-runs/paper}
shift $(( $# > 2 ? 2 : $# ))
METHODS=("$@")
[ ${#METHODS[@]} -gt 0 ] || METHODS=(direct naive_rag oracle ircot iter_retgen genground metarag dualrag cooprag r2ag)
DATA=${DATA:-../shared/data/hotpotqa/dev500.jsonl}
INDEX=${INDEX:-$OUT/index}
[ -f "$INDEX/manifest.json" ] || tandem index --dataset "$DATA" --kind hybrid --extras rala --out "$INDEX"
runs=()
for m in "${METHODS[@]}"; do
  extra=()
  if [ "$m" = r2ag ]; then
    [ -n "${R2FORMER:-}" ] || { echo "skipping r2ag: set R2FORMER=PATH"; continue; }
    extra=(--r2former "$R2FORMER")
  fi
  for opt in ${LLM_OPTS:-}; do extra+=(--llm-opt "$opt"); done
  # the judge's calibration asks every run the same pairs: the earlier runs' replies are read, not computed
  [ ${#runs[@]} -eq 0 ] || python benchmarks/seed_judge.py "$OUT/$m" "${runs[@]}"
  tandem eval qa --preset paper --method "$m" --dataset "$DATA" --index "$INDEX" --retriever dense \
    --limit "$N" --concurrency "${CONCURRENCY:-1}" --out "$OUT/$m" "${extra[@]}"
  runs+=("$OUT/$m")
done
tandem report "${runs[@]}" --json > "$OUT/report.json"
pairs=()
[[ " ${METHODS[*]} " == *" naive_rag "* ]] && pairs+=(--minus naive_rag)
[[ " ${METHODS[*]} " == *" dualrag "* && " ${METHODS[*]} " == *" ircot "* ]] && pairs+=(--pair dualrag:ircot)
python benchmarks/paper_table.py "${runs[@]}" "${pairs[@]}"
