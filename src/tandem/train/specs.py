"""What every trainer (``tandem train NAME``) shares. A method's trainer lives in its folder
(``tandem/methods/NAME/trainer.py``: its settings model and one ``TRAINERS.register(...)`` line, imported by the
package, so :data:`tandem.registry.TRAINERS` finds it with the methods); a trainer that belongs to no method
registers here. The command line's options are generated from each entry's settings model
(:mod:`tandem.cli.typed`); ``--config FILE`` reads them from YAML or JSON, with options given on the command line
on top. This module imports no model code, so the command line starts fast."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from tandem.errors import ConfigError


def runs(target: str) -> Callable[..., Any]:
    """A trainer's builder that imports ``module:function`` when it is called (the trainers' code loads torch):
    ``TRAINERS.register(NAME, settings=...)(runs("tandem.methods.NAME.train:run_training"))``."""

    def run(*args: Any, **kwargs: Any) -> Any:
        module, _, name = target.partition(":")
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    run.__qualname__ = f"run[{target}]"
    run.__doc__ = f"Runs ``{target}`` (imported on the first call)."
    return run


def backend_options(llm: str, pairs: Sequence[str]) -> dict[str, Any]:
    """The backend options of ``--llm-opt KEY=VALUE`` pairs for the in-process LLM ``llm`` that a trainer loads; a
    ConfigError for generation options (training takes none)."""
    from tandem.llm.options import parse_pairs, split_llm_options

    backend, generation = split_llm_options(llm, parse_pairs(list(pairs)))
    if generation:
        raise ConfigError(f"training takes backend options only, not {sorted(generation)}")
    return dict(backend)


__all__ = ["backend_options", "runs"]
