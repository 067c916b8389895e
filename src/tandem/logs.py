"""How loud third-party libraries are: their loggers, Python warnings and progress bars.

transformers, torch, sentence-transformers, huggingface_hub and bm25s each log, warn and draw bars
on their own terms (a bar per GGUF conversion, a "Loading weights" bar per model load, DEBUG lines
from bm25s). :func:`quiet_third_party` turns that off for CLI and library use unless verbose; tandem's
own loggers and its own progress bars (which pass ``disable=`` explicitly) are left as they are.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

# loggers of the libraries tandem drives; each is held at ERROR unless verbose
THIRD_PARTY_LOGGERS = (
    "transformers", "torch", "sentence_transformers", "huggingface_hub", "bm25s", "faiss", "accelerate",
    "optimum", "onnxruntime", "datasets", "filelock", "urllib3", "httpx", "httpcore", "flwr", "matplotlib",
    "PIL", "gguf",
)
# read by the libraries when they are first imported
_QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "DATASETS_VERBOSITY": "error",  # datasets sets its own loggers' level when imported
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    # bars that third-party code draws without a ``disable=`` argument (transformers' GGUF conversion);
    # tqdm reads TQDM_* defaults when it is imported, and an explicit ``disable=`` still wins
    "TQDM_DISABLE": "1",
}
_OWN = r"tandem(\.|$)"


def quiet_third_party(verbose: bool = False) -> None:
    """Silence third-party loggers (held at ERROR), their Python warnings and progress bars, or with
    ``verbose`` let them speak (loggers at WARNING, warnings shown once, bars on).

    Call it early, before transformers, huggingface_hub or tqdm are imported, so that the environment
    settings they read at import time apply; libraries already imported are also set directly.
    Settings the user put in the environment (e.g. ``TRANSFORMERS_VERBOSITY``) are kept.
    """
    level = logging.WARNING if verbose else logging.ERROR
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(level)
    if verbose:
        warnings.simplefilter("default")
        _set_loaded_libraries(verbose=True)
        return
    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", module=_OWN)  # tandem's own warnings still show
    _set_loaded_libraries(verbose=False)


def _set_loaded_libraries(verbose: bool) -> None:
    """Apply the setting to transformers / huggingface_hub if they are already imported (their
    environment variables are read only at import)."""
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        if verbose:
            hf_logging.set_verbosity_warning()
            hf_logging.enable_progress_bar()
        else:
            hf_logging.set_verbosity_error()
            hf_logging.disable_progress_bar()
    elif "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

        (enable_progress_bars if verbose else disable_progress_bars)()
