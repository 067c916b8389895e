#!/usr/bin/env bash
# The main job on the embedded models: index the demo corpus (hybrid BM25 + MiniLM), show what
# retrieval finds, then answer a two-hop question with IRCoT on SmolLM2 and print its trace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
QUESTION="In which city was the wife of Pierre Curie born?"
tandem index --corpus examples/demo_corpus --kind hybrid --out runs/demo/index
tandem retrieve --index runs/demo/index -k 3 "$QUESTION"
tandem ask --method ircot --index runs/demo/index --set max_steps=3 "$QUESTION"
