"""95 % bootstrap intervals of a mean, the one way the project states its figures' uncertainty: scipy's
percentile bootstrap, 2,000 resamples, seed 0 (:func:`mean_interval`), and the paired form over the
questions two runs both scored (:func:`paired_difference`). Used by the federated runs' report and the
benchmark tables (``benchmarks/paper_table.py``, ``benchmarks/paired.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import bootstrap

from tandem.errors import ConfigError

RESAMPLES = 2000


def mean_interval(values: Sequence[float], resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """The 95 % percentile-bootstrap interval of the mean of ``values``: None for fewer than 2 values; a
    constant sample's interval is the value itself (scipy would return NaN)."""
    data = np.asarray(values, dtype=float)
    if len(data) < 2:
        return None
    if np.all(data == data[0]):
        return float(data[0]), float(data[0])
    res = bootstrap((data,), np.mean, confidence_level=0.95, n_resamples=resamples, method="percentile",
                    random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def paired_difference(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[float, float, float]:
    """Mean of ``a[q] - b[q]`` over the questions both scored, with its 95 % interval (:func:`mean_interval`;
    one shared question: the difference itself); a ConfigError where they share none."""
    ids = sorted(set(a) & set(b))
    if not ids:
        raise ConfigError("the two runs share no question")
    diffs = [a[i] - b[i] for i in ids]
    mean = float(np.mean(diffs))
    low, high = mean_interval(diffs) or (mean, mean)
    return mean, low, high


__all__ = ["RESAMPLES", "mean_interval", "paired_difference"]
