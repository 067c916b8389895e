#!/usr/bin/env bash
# The main job on the embedded models: index the demo corpus (hybrid BM25 + MiniLM), show what
# retrieval finds, then answer a two-hop question on the default local model (Qwen2.5-Coder-1.5B;
# TANDEM_LOCAL_MODEL names another), print its trace (the passages
# read, the LLM call), and compare the answer with the expected one (SQuAD-normalised: an exact match, or the expected answer
# contained in a longer reply). Exit 0 whether or not it matches; the comparison line says which.
#
#   bash scripts/demo.sh              # set up .venv first (scripts/setup.sh), then run
#   bash scripts/demo.sh --no-setup   # run with the python already on PATH (tandem importable)
set -euo pipefail
cd "$(dirname "$0")/.."
setup=1
for arg in "$@"; do
  case $arg in
    --no-setup) setup=0 ;;
    *) echo "usage: bash scripts/demo.sh [--no-setup]" >&2; exit 2 ;;
  esac
done
if [ "$setup" = 1 ]; then
  bash scripts/setup.sh
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
tandem() { python -m tandem.cli "$@"; }

QUESTION="In which city was the wife of Pierre Curie born?"
EXPECTED="Warsaw"
tandem index --corpus examples/demo_corpus --kind hybrid --out runs/demo/index
tandem retrieve --index runs/demo/index -k 3 "$QUESTION"
# Why NativeRAG with the top 3 passages: the question needs two facts (Pierre Curie's wife is Marie
# Curie; Marie Curie was born in Warsaw), which one retrieval with the question finds in the top 3 (the
# Pierre Curie and Marie Curie passages), so one LLM call answers it in seconds. DualRAG's loop on the
# same model answers it too, in a few minutes on 2 cores (docs/methods/dualrag.md):
#   tandem ask --method dualrag --index runs/demo/index "$QUESTION"
tandem ask --method naive_rag --index runs/demo/index --set k=3 --expect "$EXPECTED" "$QUESTION"
