"""The project's one bootstrap: the interval of a mean and of a paired difference."""

import pytest

from tandem.errors import ConfigError
from tandem.eval.intervals import mean_interval, paired_difference


def test_the_interval_of_a_mean_holds_it_and_narrows_with_more_questions():
    few = [1.0, 0.0] * 10
    many = few * 10
    lo_few, hi_few = mean_interval(few)
    lo_many, hi_many = mean_interval(many)
    assert lo_few < 0.5 < hi_few and lo_many < 0.5 < hi_many
    assert hi_many - lo_many < (hi_few - lo_few) / 2
    assert mean_interval([0.3]) is None and mean_interval([0.4, 0.4, 0.4]) == (0.4, 0.4)
    assert mean_interval(few) == mean_interval(few)  # seeded: the same figures on every run


def test_a_paired_difference_uses_only_the_questions_both_runs_scored():
    a = {f"q{i}": 1.0 for i in range(20)} | {"only-a": 0.0}
    b = {f"q{i}": float(i % 2) for i in range(20)} | {"only-b": 1.0}
    diff, low, high = paired_difference(a, b)
    assert diff == pytest.approx(0.5) and 0 < low < 0.5 < high <= 1.0
    assert paired_difference({"q": 1.0}, {"q": 0.25}) == (0.75, 0.75, 0.75)
    with pytest.raises(ConfigError, match="share no question"):
        paired_difference(a, {"x": 1.0})
