"""The driver and the real ledger agree on the simplest path."""

from shared.wire.replies import CommandOutcome
from tests.integration.ledger_driver import Driver


async def test_create_pick_complete_round_trip(ledger, reads) -> None:
    d = Driver(ledger, reads)
    assert (await d.ensure()).outcome is CommandOutcome.APPLIED
    wid = await d.create("write the report", todo_list=[{"text": "draft"}])
    picked = await d.tool("PickWorkItem", work_item_id=wid)
    assert picked.result["transition"]["focus_mode"] == "runnable"
    done = await d.tool("CompleteWorkItem", work_item_id=wid, report_text="Report sent.")
    assert done.result["report_promoted"] is True
    assert (await reads.verify_history("agent-1")).ok
