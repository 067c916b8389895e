"""FedAvg as a pure function (McMahan et al. 2017): the example-weighted mean of client parameters.

    theta = sum_i (n_i / sum_j n_j) * theta_i

The Flower strategy (``flwr.serverapp.strategy.FedAvg``) does the same with its ``num-examples``
metric; ``tests/unit/test_corag.py`` checks the two agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tandem.errors import ConfigError


def fedavg(updates: Sequence[Mapping[str, np.ndarray]], num_examples: Sequence[float]) -> dict[str, np.ndarray]:
    """Average named arrays weighted by each client's example count."""
    if not updates:
        raise ConfigError("FedAvg needs at least one client update")
    if len(updates) != len(num_examples):
        raise ConfigError(f"{len(updates)} updates but {len(num_examples)} example counts")
    if any(n < 0 for n in num_examples) or sum(num_examples) <= 0:
        raise ConfigError(f"example counts must be non-negative with a positive sum, got {list(num_examples)}")
    names = list(updates[0])
    for i, u in enumerate(updates[1:], start=1):
        if list(u) != names:
            raise ConfigError(f"client {i} sent parameters {sorted(set(u) ^ set(names))[:3]} the others did not")
    total = float(sum(num_examples))
    out: dict[str, np.ndarray] = {}
    for name in names:
        shapes = {tuple(u[name].shape) for u in updates}
        if len(shapes) != 1:
            raise ConfigError(f"parameter {name!r} has different shapes across clients: {sorted(shapes)}")
        acc = np.zeros(next(iter(shapes)), dtype=np.float64)
        for u, n in zip(updates, num_examples, strict=True):
            acc += (float(n) / total) * np.asarray(u[name], dtype=np.float64)
        out[name] = acc.astype(updates[0][name].dtype)
    return out
