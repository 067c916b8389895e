#!/usr/bin/env bash
# Set up, then run every test: fast unit tests and integration tests on the real embedded models
# (../shared/data must sit beside the project). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
python -m pytest tests -q "$@"
