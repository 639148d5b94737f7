"""Memory across turns, pure: rounds grouped from recorded entries, the trace fitted to its
budget, what goes to compaction, notes text kept within budget, the scripted extract, and which
of the transcript's oldest rounds may be trimmed. Counts use a word count to stay obvious."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.ledger.rules import Context, decide
from shared.domain import memory as m
from shared.domain.errors import DomainError
from shared.domain.records import NoteCovers, ProcessNote, WorkItemState
from shared.domain.trimming import parked_entries, trimmable_prefix
from shared.wire import commands as c
from shared.wire.events import TranscriptTrimmed, WorkItemCompacted, WorkItemUpdated
from tests.builders import make_work_item, ulid_body
from tests.unit.ledger_kit import ITEM, NOW, OTHER, ledger_state, new_id, only, run


def ctx() -> Context:
    return Context(now=NOW, new_id=new_id)


def words(text: str) -> int:
    return len(text.split())


def turn(n: int) -> str:
    return "turn_" + ulid_body(n)


def entry(
    t: int, r: int, role: str, content: str, tool: str | None = None, *, wi: str = ITEM
) -> dict[str, Any]:
    return {
        "turn_id": turn(t),
        "work_item_id": wi,
        "round": r,
        "role": role,
        "content": content,
        "tool_name": tool,
    }


def note(n: int, to: int, text: str = "kept", frm: int = 1, wi: str = ITEM) -> ProcessNote:
    return ProcessNote(
        id="note_" + ulid_body(n),
        work_item_id=wi,
        text=text,
        covers=NoteCovers(from_turn=turn(frm), to_turn=turn(to)),
        created_at=NOW,
    )


def test_rounds_hold_what_the_agent_said_and_did_and_what_tools_answered() -> None:
    entries = [
        entry(1, 0, "user", "# WorkItems of a (the prompt is not process)"),
        entry(1, 1, "assistant", "Reading the facts."),
        entry(1, 1, "assistant", '{"path": "facts.txt"}', tool="ReadFile"),
        entry(
            1, 1, "tool", '{"status": "success", "content": "the code is 7319"}', tool="ReadFile"
        ),
        entry(2, 1, "assistant", "Done."),
    ]
    rounds = m.trace_rounds(entries, max_entry_chars=1000)
    assert [(r.turn_id, r.round) for r in rounds] == [(turn(1), 1), (turn(2), 1)]
    assert rounds[0].text.splitlines() == [
        f"### {turn(1)} round 1",
        "assistant: Reading the facts.",
        'call ReadFile {"path": "facts.txt"}',
        'result ReadFile: {"status": "success", "content": "the code is 7319"}',
    ]


def test_what_longrun_told_the_agent_about_its_process_stays_in_its_trace() -> None:
    """The §13 notice of a call with an unknown outcome is recorded as a system entry: later
    turns' traces (and the notes compacted from them) keep it."""
    notice = "call call_1: web__pay({}) was started by an interrupted turn; its outcome is unknown"
    entries = [entry(2, 0, "system", notice), entry(2, 1, "assistant", "Checking first.")]
    rounds = m.trace_rounds(entries, max_entry_chars=1000)
    assert [r.text.splitlines() for r in rounds] == [
        [f"### {turn(2)} round 0", f"longrun: {notice}"],
        [f"### {turn(2)} round 1", "assistant: Checking first."],
    ]
    assert f"longrun: {notice}" in m.extract(m.compaction_input(ITEM, "Pay", rounds), 500, words)


def test_a_long_entry_is_cut_with_a_note() -> None:
    (r,) = m.trace_rounds([entry(1, 1, "tool", "x" * 50, tool="ReadFile")], max_entry_chars=10)
    assert r.text.endswith("x" * 10 + " […40 characters cut]")


def rounds_of(*sizes: tuple[int, int, int]) -> list[m.TraceRound]:
    return [m.TraceRound(turn(t), r, " ".join(["w"] * n)) for t, r, n in sizes]


def test_a_trace_that_fits_is_shown_whole_and_nothing_is_compacted() -> None:
    fit = m.fit_trace(rounds_of((1, 1, 10), (2, 1, 10)), 20, words)
    assert (len(fit.shown), fit.to_compact, fit.tokens) == (2, (), 20)


def test_an_overflowing_trace_compacts_oldest_whole_turns_down_to_half_the_budget() -> None:
    rounds = rounds_of((1, 1, 10), (1, 2, 10), (2, 1, 10), (3, 1, 10), (4, 1, 10))
    fit = m.fit_trace(rounds, 40, words)
    assert [(r.turn_id, r.round) for r in fit.to_compact] == [
        (turn(1), 1),
        (turn(1), 2),
        (turn(2), 1),
    ]
    assert [r.turn_id for r in fit.shown] == [turn(3), turn(4)]
    assert fit.tokens == 20


def test_a_newest_turn_larger_than_the_budget_is_compacted_too() -> None:
    fit = m.fit_trace(rounds_of((1, 1, 50)), 40, words)
    assert (fit.shown, len(fit.to_compact)) == ((), 1)


def test_without_compaction_the_newest_rounds_that_fit_are_kept() -> None:
    kept = m.newest_within(rounds_of((1, 1, 10), (2, 1, 10), (3, 1, 10)), 25, words)
    assert [r.turn_id for r in kept] == [turn(2), turn(3)]


def test_a_turn_is_covered_up_to_the_newest_note() -> None:
    notes = (note(1, 3), note(2, 7))
    assert m.is_covered(turn(7), notes, 40)
    assert m.is_covered(turn(2), notes, 1)
    assert not m.is_covered(turn(8), notes, 1)
    assert not m.is_covered(turn(1), (), 1)


def test_a_note_written_between_rounds_covers_its_last_turn_up_to_that_round() -> None:
    between = note(3, 7).model_copy(
        update={"covers": NoteCovers(from_turn=turn(5), to_turn=turn(7), to_round=4)}
    )
    notes = (note(1, 3), between)
    assert m.is_covered(turn(6), notes, 30)
    assert m.is_covered(turn(7), notes, 4)
    assert not m.is_covered(turn(7), notes, 5)
    assert not m.is_covered(turn(8), notes, 1)
    assert m.covers_text(between.covers) == f"turns {turn(5)}..{turn(7)} round 4"
    items = {ITEM: make_work_item(id=ITEM, process_notes=notes)}
    head = [entry(7, r, "tool", f"r{r}") for r in (3, 4, 5, 6)]
    assert trimmable_prefix(head, items, rounds=10) == (2, 2)


def test_fit_text_keeps_the_first_and_last_lines_and_says_what_it_left_out() -> None:
    text = "\n".join(f"line {n} here" for n in range(100))
    fitted = m.fit_text(text, 60, words)
    lines = fitted.splitlines()
    assert lines[0] == "line 0 here"
    assert lines[-1] == "line 99 here"
    assert any(line.startswith("[… ") and "lines left out" in line for line in lines)
    assert words(fitted) <= 60


def test_the_scripted_extract_is_deterministic_keeps_distinct_lines_and_fits() -> None:
    text = "a fact: 7319\n\nsame line\nsame line\n" + "\n".join(f"noise {n}" for n in range(500))
    first = m.extract(text, 100, words)
    assert first == m.extract(text, 100, words)
    assert first.splitlines()[:2] == ["a fact: 7319", "same line"]
    assert words(first) <= 100


def test_notes_and_trace_render_under_their_headings() -> None:
    text = m.notes_message(ITEM, [note(1, 3, "the code is 7319")])
    assert text.startswith(f"## Process notes of {ITEM}")
    assert f"### turns {turn(1)}..{turn(3)}" in text
    assert "the code is 7319" in text
    trace = m.trace_message(ITEM, rounds_of((4, 1, 2)), left_out=3, reason="compaction failed: x")
    assert trace.startswith(f"## Process trace of {ITEM}")
    assert "[3 older rounds are not shown" in trace
    assert "compaction failed: x" in trace


def test_the_transcript_head_is_trimmed_in_whole_rounds_up_to_the_first_still_needed() -> None:
    open_item = make_work_item(id=ITEM, process_notes=(note(1, 2),))
    done = make_work_item(id=OTHER, state=WorkItemState.COMPLETED, result_summary="done")
    items = {ITEM: open_item, OTHER: done}
    head = [
        entry(1, 0, "user", "p", wi=OTHER),
        entry(1, 1, "assistant", "a", wi=OTHER),
        entry(2, 1, "assistant", "b"),
        entry(2, 1, "tool", "c", tool="X"),
        entry(3, 1, "assistant", "not covered"),
        entry(4, 1, "assistant", "later"),
    ]
    assert trimmable_prefix(head, items, 10) == (4, 3)
    assert trimmable_prefix(head, items, 2) == (2, 2)
    uncovered = make_work_item(id=ITEM)
    assert trimmable_prefix(head, {ITEM: uncovered, OTHER: done}, 10) == (2, 2)


def test_the_prompt_a_turn_was_shown_never_holds_the_head() -> None:
    """User entries (summary, inbox, marks) are never shown again: an open item's uncovered
    opening round 0 does not stop the trim; its process round 1 does."""
    items = {ITEM: make_work_item(id=ITEM)}
    head = [entry(1, 0, "user", "# WorkItems"), entry(1, 1, "assistant", "working")]
    assert trimmable_prefix(head, items, 10) == (1, 1)


def test_parked_items_holding_the_head_are_named_with_their_entries_up_to_the_current() -> None:
    """What compaction can release: the uncovered entries of open items that are not current,
    within the rounds to trim, stopping at the current item's first uncovered round."""
    parked, current = ITEM, OTHER
    items = {parked: make_work_item(id=parked), current: make_work_item(id=current)}
    head = [
        entry(1, 0, "user", "prompt", wi=parked),
        entry(1, 1, "assistant", "read the quote", wi=parked),
        entry(1, 1, "tool", "4411 units", tool="ReadFile", wi=parked),
        entry(2, 1, "assistant", "covered? no: current", wi=current),
        entry(3, 1, "assistant", "parked again", wi=parked),
    ]
    found = parked_entries(head, items, 10, current)
    assert {key: [e["content"] for e in found[key]] for key in found} == {
        parked: ["read the quote", "4411 units"]
    }
    everything = parked_entries(head, items, 10, None)  # no current item: all of them
    assert [e["content"] for e in everything[parked]][-1] == "parked again"
    assert list(everything) == [parked, current]
    assert list(parked_entries(head, items, 2, None)) == [parked]  # the first two rounds only
    done = make_work_item(id=parked, state=WorkItemState.COMPLETED, result_summary="done")
    assert parked_entries(head, {**items, parked: done}, 10, current) == {}


def test_rounds_are_chunked_for_compaction_calls_within_a_budget() -> None:
    rounds = rounds_of((1, 1, 4), (1, 2, 4), (2, 1, 9), (3, 1, 2))
    groups = m.chunks(rounds, 8, words)
    assert [[(r.turn_id, r.round) for r in g] for g in groups] == [
        [(turn(1), 1), (turn(1), 2)],
        [(turn(2), 1)],
        [(turn(3), 1)],
    ]


def test_a_round_cut_off_by_the_end_of_the_head_read_is_not_trimmed() -> None:
    done = make_work_item(id=OTHER, state=WorkItemState.COMPLETED, result_summary="done")
    head = [entry(1, 1, "assistant", "a", wi=OTHER), entry(2, 1, "assistant", "b", wi=OTHER)]
    assert trimmable_prefix(head, {OTHER: done}, 10) == (1, 1)


def test_compact_work_item_replaces_the_notes_and_records_the_newest() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=2)
    notes = (note(1, 2), note(2, 4))
    cmd = c.CompactWorkItem(
        command_id="t:compact",
        agent_id=state.agent_id,
        turn_id="t",
        fencing_token=2,
        work_item_id=ITEM,
        notes=notes,
        merged=("note_" + ulid_body(9),),
    )
    decision = run(state, cmd)
    item = decision.state.items[ITEM]
    assert item.process_notes == notes
    assert item.revision == 2
    (event,) = only(decision.events, WorkItemCompacted)
    assert (event.note, event.notes, event.merged) == (notes[-1], 2, cmd.merged)


def test_compact_work_item_refuses_a_stale_token_and_another_items_note() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=3)
    base = {"command_id": "t:c", "agent_id": state.agent_id, "turn_id": "t", "work_item_id": ITEM}
    with pytest.raises(DomainError, match=r"stale|fenc"):
        decide(state, c.CompactWorkItem(**base, fencing_token=2, notes=(note(1, 2),)), ctx())
    with pytest.raises(DomainError, match="not about"):
        decide(
            state, c.CompactWorkItem(**base, fencing_token=3, notes=(note(1, 2, wi=OTHER),)), ctx()
        )


def test_trim_transcript_drops_the_head_as_a_side_write() -> None:
    state = ledger_state(make_work_item(id=ITEM), current=ITEM, fence=1)
    cmd = c.TrimTranscript(
        command_id="t:trim",
        agent_id=state.agent_id,
        turn_id="t",
        fencing_token=1,
        entries=7,
        rounds=3,
    )
    decision = run(state, cmd)
    assert decision.side.transcript_trim == (7, 3)
    (event,) = only(decision.events, TranscriptTrimmed)
    assert (event.entries, event.rounds) == (7, 3)


def test_an_event_carrying_a_work_item_leaves_its_process_notes_out() -> None:
    item = make_work_item(id=ITEM, process_notes=(note(1, 2, text="a long note"),))
    event = WorkItemUpdated(agent_id="agent-1", work_item_id=ITEM, work_item=item, changed=("x",))
    data = event.data()
    assert "process_notes" not in data["work_item"]
    assert data["work_item"]["id"] == ITEM
    assert "agent_id" not in data


def test_the_compaction_prompts_are_the_documented_ones() -> None:
    page = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    assert f"```text\n{m.COMPACTION_PROMPT}\n```" in page
    assert f"```text\n{m.MERGE_PROMPT}\n```" in page


def test_a_trace_whose_bound_fits_is_shown_whole_without_counting() -> None:
    def never(text: str) -> int:
        raise AssertionError("counted although the bound showed the trace fits")

    rounds = rounds_of((1, 1, 10), (2, 1, 10))
    fit = m.fit_trace(rounds, 40, never, bound=len)
    assert (len(fit.shown), fit.to_compact, fit.tokens) == (2, (), 38)


def test_a_trace_whose_bound_does_not_fit_is_counted() -> None:
    rounds = rounds_of((1, 1, 10), (2, 1, 10))
    fit = m.fit_trace(rounds, 20, words, bound=len)
    assert (len(fit.shown), fit.to_compact, fit.tokens) == (2, (), 20)
