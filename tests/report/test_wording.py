"""Counts in the report's and correlate's sentences agree with their number."""

from __future__ import annotations

from envduels.analysis.transfer import MIN_UNITS, Correlation, conclusion


def test_too_few_units_is_worded_for_zero_one_and_several():
    none = Correlation("pearson", None, None, None, None, "none")
    assert conclusion("mean_hint_lift", 0, none, None, "author").startswith(
        "No author pools have both a gain and a value of mean_hint_lift: too few")
    assert conclusion("mean_hint_lift", 1, none, None, "author").startswith(
        "Only 1 author pool has both a gain and a value of mean_hint_lift")
    assert conclusion("lift", 2, none, None, "environment").startswith(
        "Only 2 environments have both a gain and a value of lift")
    assert f"at least {MIN_UNITS}" in conclusion("lift", 2, none, None, "environment")
