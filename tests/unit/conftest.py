"""Unit tests are pure and quick: each gets a 10 s timeout (the suite's default is 120 s), so
one that starts waiting on a server or a clock fails at once instead of holding CI."""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT_TIMEOUT_SECONDS = 10
PROPERTY_TIMEOUT_SECONDS = 60
"""A Hypothesis test runs up to a few hundred examples: its time is that count times the
machine's speed, and a loaded CI machine stretches it past 10 s without anything hanging."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here not in item.path.parents:
            continue
        test = getattr(item, "obj", None)
        seconds = (
            PROPERTY_TIMEOUT_SECONDS
            if getattr(test, "is_hypothesis_test", False)
            else UNIT_TIMEOUT_SECONDS
        )
        # Appended: a test's own timeout marker, if it has one, stays the closest and wins.
        item.add_marker(pytest.mark.timeout(seconds))
