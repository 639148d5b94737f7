"""Group commit of stream batches (shared.coalesce): who runs together, who fails alone."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Sequence

import pytest

from shared.coalesce import Coalescer, RoundCancelled


class Recorder:
    """A round function that records what each round carried; `held` rounds wait to be let go."""

    def __init__(self, poison: str | None = None, *, held: bool = False) -> None:
        self.rounds: list[list[str]] = []
        self.gates: list[asyncio.Event] = []
        self.held = held
        self.poison = poison

    async def run(self, items: Sequence[str]) -> None:
        self.rounds.append(list(items))
        gate = asyncio.Event()
        self.gates.append(gate)
        if self.held:
            await gate.wait()
        if self.poison in items:
            raise ValueError(f"cannot handle {self.poison}")

    def release(self) -> None:
        """Let the latest round end, and every round after it run through."""
        self.held = False
        self.gates[-1].set()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_batch_with_nothing_running_is_decided_at_once_and_alone() -> None:
    rec = Recorder()
    await Coalescer(rec.run, limit=100, rounds=1).submit(["a"])
    assert rec.rounds == [["a"]]


async def test_batches_arriving_during_a_round_share_the_next_round() -> None:
    rec = Recorder(held=True)
    coalescer = Coalescer(rec.run, limit=100, rounds=1)
    first = asyncio.create_task(coalescer.submit(["a"]))
    await _settle()
    later = [asyncio.create_task(coalescer.submit([x])) for x in ("b", "c", "d")]
    await _settle()
    rec.release()
    await asyncio.gather(first, *later)
    assert rec.rounds == [["a"], ["b", "c", "d"]]
    assert coalescer.rounds == 2


async def test_a_failing_combined_round_is_retried_batch_by_batch_so_only_the_culprit_fails() -> (
    None
):
    rec = Recorder(poison="bad", held=True)
    coalescer = Coalescer(rec.run, limit=100, rounds=1)
    first = asyncio.create_task(coalescer.submit(["a"]))
    await _settle()
    good = asyncio.create_task(coalescer.submit(["b"]))
    bad = asyncio.create_task(coalescer.submit(["bad"]))
    await _settle()
    rec.release()
    await asyncio.gather(first, good)
    with pytest.raises(ValueError, match="cannot handle bad"):
        await bad
    assert rec.rounds == [["a"], ["b", "bad"], ["b"], ["bad"]]


async def test_a_lone_failing_batch_raises_its_own_error_and_the_next_one_still_runs() -> None:
    rec = Recorder(poison="bad")
    coalescer = Coalescer(rec.run, limit=100, rounds=1)
    with pytest.raises(ValueError, match="cannot handle bad"):
        await coalescer.submit(["bad"])
    await coalescer.submit(["a"])
    assert rec.rounds == [["bad"], ["a"]]


async def test_a_submitter_stopped_while_waiting_is_skipped_and_the_next_one_leads() -> None:
    rec = Recorder(held=True)
    coalescer = Coalescer(rec.run, limit=100, rounds=1)
    first = asyncio.create_task(coalescer.submit(["a"]))
    await _settle()
    stopped = asyncio.create_task(coalescer.submit(["b"]))
    await _settle()
    stopped.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopped
    later = asyncio.create_task(coalescer.submit(["c"]))
    await _settle()
    rec.release()
    await asyncio.gather(first, later)
    assert rec.rounds == [["a"], ["c"]]


async def test_a_cancelled_leader_fails_the_others_of_its_round_for_a_retry() -> None:
    rec = Recorder(held=True)
    coalescer = Coalescer(rec.run, limit=100, rounds=1)
    first = asyncio.create_task(coalescer.submit(["a"]))
    await _settle()
    leader = asyncio.create_task(coalescer.submit(["b"]))
    other = asyncio.create_task(coalescer.submit(["c"]))
    await _settle()
    rec.gates[-1].set()  # the first round ends; "b" leads the round carrying "b" and "c"
    await first
    await _settle()
    assert rec.rounds == [["a"], ["b", "c"]]
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    with pytest.raises(RoundCancelled):
        await other
    rec.held = False
    await coalescer.submit(["d"])
    assert rec.rounds[-1] == ["d"]


async def test_a_submitter_stopped_right_after_being_asked_to_lead_passes_the_lead_on() -> None:
    rounds: list[list[str]] = []
    gate = asyncio.Event()
    tasks: dict[str, asyncio.Task[None]] = {}

    async def run(items: Sequence[str]) -> None:
        rounds.append(list(items))
        if items == ["a"]:
            await gate.wait()
            # Runs after this round hands the lead to "b" and before "b" resumes.
            asyncio.get_running_loop().call_soon(tasks["b"].cancel)

    coalescer = Coalescer(run, limit=100, rounds=1)
    first = asyncio.create_task(coalescer.submit(["a"]))
    await _settle()
    tasks["b"] = asyncio.create_task(coalescer.submit(["b"]))
    await _settle()
    gate.set()
    await first
    with pytest.raises(asyncio.CancelledError):
        await tasks["b"]
    await asyncio.wait_for(coalescer.submit(["c"]), timeout=5)
    assert rounds == [["a"], ["c"]]


async def test_a_round_takes_whole_batches_up_to_its_limit_and_leaves_the_rest_for_the_next() -> (
    None
):
    rec = Recorder(held=True)
    coalescer = Coalescer(rec.run, limit=3, rounds=1)
    first = asyncio.create_task(coalescer.submit(["a"]))
    await _settle()
    later = [
        asyncio.create_task(coalescer.submit(batch))
        for batch in (["b", "c"], ["d"], ["e", "f"], ["g", "h", "i", "j"])
    ]
    await _settle()
    rec.release()
    await asyncio.gather(first, *later)
    assert rec.rounds == [["a"], ["b", "c", "d"], ["e", "f"], ["g", "h", "i", "j"]]


async def test_with_two_round_slots_a_second_batch_starts_at_once_and_a_third_waits() -> None:
    rec = Recorder(held=True)
    coalescer = Coalescer(rec.run, limit=100, rounds=2)
    tasks = [asyncio.create_task(coalescer.submit([x])) for x in ("a", "b")]
    await _settle()
    assert rec.rounds == [["a"], ["b"]]
    tasks += [asyncio.create_task(coalescer.submit([x])) for x in ("c", "d")]
    await _settle()
    assert rec.rounds == [["a"], ["b"]]
    rec.gates[0].set()  # "a" ends: its slot takes "c" and "d" together
    await _settle()
    assert rec.rounds == [["a"], ["b"], ["c", "d"]]
    rec.release()
    rec.gates[1].set()
    await asyncio.gather(*tasks)
    assert coalescer.rounds == 3


class Batch(list[str]):
    """A batch that can be watched through a weak reference."""


async def test_a_finished_round_frees_its_batches_without_the_cycle_collector() -> None:
    """Nothing a round carried may wait for the cycle collector once it ended: with the
    services' large young-generation threshold, the ledger's rounds (every command, its inputs
    and todos) piled up until a collection that stalled the loop for 50-100 ms."""
    recorder = Recorder(held=True)
    coalescer: Coalescer[str] = Coalescer(recorder.run, limit=10, rounds=1)
    batches = [Batch([f"b{i}"]) for i in range(4)]
    refs = [weakref.ref(b) for b in batches]
    gc.disable()
    try:
        tasks = [asyncio.create_task(coalescer.submit(b)) for b in batches]
        await _settle()
        recorder.release()  # the first round (b0 alone), then one round for b1-b3
        await asyncio.gather(*tasks)
        assert recorder.rounds == [["b0"], ["b1", "b2", "b3"]]
        del batches, tasks
        assert [ref() for ref in refs] == [None] * 4
    finally:
        gc.enable()


async def test_posts_of_one_iteration_share_the_next_round_in_order() -> None:
    rec = Recorder()
    coalescer = Coalescer(rec.run, limit=100, rounds=1)
    posted = [coalescer.post([x]) for x in ("a", "b", "c")]
    assert rec.rounds == []  # posting returns at once: the round starts on the next iteration
    await asyncio.gather(*posted)
    assert rec.rounds == [["a", "b", "c"]]


async def test_a_post_while_a_round_runs_goes_in_the_next_behind_earlier_posts() -> None:
    rec = Recorder(held=True)
    coalescer = Coalescer(rec.run, limit=100, rounds=1)
    first = coalescer.post(["a"])
    await _settle()
    later = [coalescer.post([x]) for x in ("b", "c")]
    await _settle()
    assert rec.rounds == [["a"]]
    rec.release()
    await asyncio.gather(first, *later)
    assert rec.rounds == [["a"], ["b", "c"]]


async def test_a_failing_post_fails_only_its_own_task() -> None:
    rec = Recorder(poison="bad")
    coalescer = Coalescer(rec.run, limit=100, rounds=1)
    good, bad = coalescer.post(["a"]), coalescer.post(["bad"])
    assert await good is None
    with pytest.raises(ValueError, match="cannot handle bad"):
        await bad
    assert rec.rounds == [["a", "bad"], ["a"], ["bad"]]
