"""quiet_third_party: third-party loggers, warnings and bars off unless verbose."""

from __future__ import annotations

import logging
import warnings

import pytest

from tandem.logs import _QUIET_ENV, THIRD_PARTY_LOGGERS, quiet_third_party


@pytest.fixture
def clean_state(monkeypatch):
    for key in _QUIET_ENV:
        monkeypatch.delenv(key, raising=False)
    levels = {name: logging.getLogger(name).level for name in THIRD_PARTY_LOGGERS}
    with warnings.catch_warnings():
        yield monkeypatch
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_quiet_holds_third_party_loggers_at_error_and_sets_the_import_time_switches(clean_state):
    import os

    quiet_third_party(verbose=False)
    assert logging.getLogger("bm25s").getEffectiveLevel() == logging.ERROR
    assert not logging.getLogger("transformers.modeling_utils").isEnabledFor(logging.WARNING)
    assert os.environ["TQDM_DISABLE"] == "1" and os.environ["TRANSFORMERS_VERBOSITY"] == "error"
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"


def test_quiet_keeps_settings_the_user_chose(clean_state):
    import os

    clean_state.setenv("TRANSFORMERS_VERBOSITY", "info")
    quiet_third_party(verbose=False)
    assert os.environ["TRANSFORMERS_VERBOSITY"] == "info"


def test_quiet_drops_third_party_warnings_but_not_tandems(clean_state):
    quiet_third_party(verbose=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.warn_explicit("third", UserWarning, "x.py", 1, module="torch.nn.modules")
        warnings.warn_explicit("own", UserWarning, "y.py", 1, module="tandem.index")
    assert [str(w.message) for w in seen] == ["own"]


def test_verbose_lets_them_speak(clean_state):
    quiet_third_party(verbose=False)
    quiet_third_party(verbose=True)
    assert logging.getLogger("bm25s").getEffectiveLevel() == logging.WARNING
    with warnings.catch_warnings(record=True) as seen:
        warnings.warn_explicit("third", UserWarning, "x.py", 1, module="torch.nn.modules")
    assert [str(w.message) for w in seen] == ["third"]
