"""Shared fixtures: paths to ../shared/data and small in-memory corpora."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tandem.types import Document

# a plain ``local`` is the small model here: these tests check protocols, not answers (scripts/test.sh)
os.environ.setdefault("TANDEM_LOCAL_MODEL", "smollm2-135m")

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
BENCHMARKS = ROOT / "benchmarks"


def tandem(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m tandem.cli ARGS`` in a subprocess from the repository root, as a user runs it: its exit
    code, stdout and stderr (``env``: variables added to this process's)."""
    return subprocess.run([sys.executable, "-m", "tandem.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env={**os.environ, **(env or {})})


def shared(rel: str) -> Path:
    """A file of ../shared/data; skips the test if the folder is absent (it is present in CI)."""
    path = SHARED_DATA / rel
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


def benchmark_script(name: str) -> ModuleType:
    """``benchmarks/NAME.py`` imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_script", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def small_docs() -> list[Document]:
    texts = {
        "d1": ("Marie Curie", "Marie Curie was born in Warsaw and won two Nobel Prizes."),
        "d2": ("Pierre Curie", "Pierre Curie was a French physicist born in Paris."),
        "d3": ("Warsaw", "Warsaw is the capital of Poland on the Vistula river."),
        "d4": ("Vistula", "The Vistula is the longest river in Poland."),
        "d5": ("Paris", "Paris is the capital of France on the Seine."),
    }
    return [Document(i, t, x) for i, (t, x) in texts.items()]


@pytest.fixture
def search(tmp_path, small_docs):
    """A BM25 search over ``small_docs`` (an index built in the test's folder)."""
    from tandem.index import build_index, open_index
    from tandem.methods import Search
    from tandem.retrieve import open_retriever

    build_index(small_docs, tmp_path / "idx", kind="bm25")
    idx = open_index(tmp_path / "idx")
    return Search(open_retriever(idx), idx.store)


CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<reponame>"]


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory):
    """A 1-layer random Llama (hidden 32) with a byte-level BPE tokenizer and a chat template."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from tandem.llm.hf import HFLLM

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = ["Marie Curie was born in Warsaw.", "Question: Answer: similarity Title search results answer only"] * 5
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", unk_token="<|endoftext|>",
                                  pad_token="<|endoftext|>")
    tok.chat_template = CHAT
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                      eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), pad_token_id=0)
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return HFLLM(str(folder), num_threads=1)


def dead_pid() -> int:
    """The id of a process that has exited (a lock or a swap left by a crashed process)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def closed_port_url() -> str:
    """The base URL of an OpenAI-style server that has just stopped: connections to it are refused."""
    from tandem.testing.fake_server import FakeOpenAIServer

    with FakeOpenAIServer() as srv:
        url = srv.base_url
    return url


def sigint_default() -> None:
    """``preexec_fn`` for a child the tests Ctrl-C: a runner started in the background by a shell without
    job control ignores SIGINT, and its children inherit that; give the child Python's default back."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
