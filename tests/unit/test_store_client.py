"""The hiredis packer behind every Redis call (shared.store.client.HiredisPackingConnection)."""

from __future__ import annotations

from typing import Any

import hiredis

from shared.store.client import HiredisPackingConnection


def packed(*args: Any) -> bytes:
    (out,) = HiredisPackingConnection.pack_command(None, *args)  # type: ignore[arg-type]
    return out


def test_floats_keep_every_digit_and_the_rest_is_packed_as_given() -> None:
    score = 0.1 + 0.2
    assert b"0.30000000000000004" in packed("ZADD", "k", score, "m")
    assert packed("ZADD", "k", score, b"m") == hiredis.pack_command(
        ("ZADD", "k", repr(score), b"m")
    )
    assert packed("FCALL", "lr_commit", 1, "key", b"\x00bytes", "text") == hiredis.pack_command(
        ("FCALL", "lr_commit", 1, "key", b"\x00bytes", "text")
    )


def test_a_float_subclass_is_written_in_full_too() -> None:
    class Score(float):
        pass

    assert b"0.30000000000000004" in packed("ZADD", "k", Score(0.1 + 0.2), "m")


def test_a_command_name_with_a_space_is_split() -> None:
    assert packed("XINFO GROUPS", "s") == hiredis.pack_command(("XINFO", "GROUPS", "s"))
