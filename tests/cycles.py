"""What a block of code leaves for the cycle collector.

The services collect their young generation only every 50,000 objects (`shared.runtime`), so a
hot path that leaves its objects in reference cycles piles them up until a collection that stalls
the event loop for tens of milliseconds. Tests of those paths assert they leave none of ours."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

OURS = ("shared.", "services.")


@contextlib.contextmanager
def cyclic_garbage() -> Iterator[list[str]]:
    """Yields a list that, once the block ends, names the type of every object of longrun's own
    modules that the block made unreachable but only the cycle collector could free."""
    found: list[str] = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(
            type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith(OURS)
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
