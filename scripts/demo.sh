#!/usr/bin/env bash
# The main job on the embedded models: index the demo corpus (hybrid BM25 + MiniLM) and ask it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
tandem index --corpus examples/demo_corpus --kind hybrid --out runs/demo/index
tandem retrieve --index runs/demo/index -k 3 "In which city was the wife of Pierre Curie born?"
