"""Benchmarks carry the `bench` marker; the default `-m 'not bench and not manual'` in
pyproject.toml deselects them, and `pytest tests/bench -m bench -s` runs them by hand."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.bench)
