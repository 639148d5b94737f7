"""Chaos runs start the whole stack as processes on a private Redis; every test here is marked
`chaos` (and `e2e`), so `-m 'not chaos'` leaves them out of a quick local run."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.chaos)
            item.add_marker(pytest.mark.e2e)
