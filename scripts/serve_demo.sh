#!/usr/bin/env bash
# Serve the demo corpus with the embedded models: the web page at http://127.0.0.1:${PORT:-8000}/
# (API docs at /docs). Set-up and the demo index are made on first use; Ctrl-C stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
[ -f runs/demo/index/manifest.json ] || tandem index --corpus examples/demo_corpus --kind hybrid --out runs/demo/index
exec tandem serve --index demo=runs/demo/index --method "${METHOD:-ircot}" --port "${PORT:-8000}" "$@"
