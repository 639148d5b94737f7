"""A pure, in-memory world of agents for delegation rule tests: each agent's slice is decided by
the real ledger rules, commands carry ids applied once per agent (as `lr_commit` does), and the
outbox's commands are held in a queue the test delivers, drops, repeats or reorders."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from itertools import count
from typing import Any

from services.ledger.rules import Context, Decision, LedgerState, decide
from services.ledger.store import agents_named
from shared.domain.delegation import DelegationRecord
from shared.domain.errors import DomainError
from shared.domain.records import InboxMessage, WorkItem
from shared.domain.webhooks import WebhookAllow
from shared.wire import commands as c
from shared.wire.events import Event
from tests.builders import at, make_agent, make_agent_record, make_plan_artifact, ulid_body


@dataclass
class World:
    states: dict[str, LedgerState] = field(default_factory=dict)
    applied: dict[str, set[str]] = field(default_factory=dict)
    outbox: list[c.Command] = field(default_factory=list)
    inbox: dict[str, list[InboxMessage]] = field(default_factory=dict)
    records: dict[str, dict[str, DelegationRecord]] = field(default_factory=dict)
    events: dict[str, list[Event]] = field(default_factory=dict)
    max_depth: int = 4
    webhook_allow: WebhookAllow = field(default_factory=WebhookAllow)
    now: datetime = field(default_factory=lambda: at(minutes=1))
    """The instant every decision is made at (a test moves it to pass a deadline)."""
    max_verify_attempts: int = 3
    max_children: int = 8
    _ids: count[int] = field(default_factory=lambda: count(1))

    def new_id(self, prefix: str) -> str:
        return prefix + ulid_body(next(self._ids))

    def ctx(self) -> Context:
        return Context(
            now=self.now,
            new_id=self.new_id,
            max_delegation_depth=self.max_depth,
            webhook_allow=self.webhook_allow,
            max_verify_attempts=self.max_verify_attempts,
            max_children=self.max_children,
        )

    def add_agent(self, agent_id: str, *, budget: int = 25) -> None:
        record = make_agent_record(
            state=make_agent(agent_id=agent_id, wake_budget={"used": 0, "limit": budget})
        )
        self.states[agent_id] = LedgerState(agent_id=agent_id, agent=record, fence=1)
        self.applied[agent_id] = set()

    def apply(self, cmd: c.Command) -> Decision | DomainError | None:
        """Apply once per (agent, command id); None for a repeat (the stored reply's case)."""
        seen = self.applied.setdefault(cmd.agent_id, set())
        if cmd.command_id in seen:
            return None
        state = self.states.get(cmd.agent_id) or LedgerState(agent_id=cmd.agent_id, agent=None)
        # What the store's lookup finds: the agents the command names that exist.
        state = state._copy(agents_found=agents_named(cmd) & self.states.keys())
        try:
            decision = decide(state, cmd, self.ctx())
        except DomainError as err:
            seen.add(cmd.command_id)
            return err
        seen.add(cmd.command_id)
        self.states[cmd.agent_id] = decision.state.committed()
        self.outbox += decision.side.outbox
        self.inbox.setdefault(cmd.agent_id, []).extend(decision.side.inbox_push)
        for record in decision.side.delegations:
            self.records.setdefault(cmd.agent_id, {})[record.id] = record
        self.events.setdefault(cmd.agent_id, []).extend(decision.events)
        return decision

    def deliver_all(self) -> int:
        """Deliver every owed command, including those their delivery owes in turn."""
        delivered = 0
        while self.outbox:
            cmd = self.outbox.pop(0)
            self.apply(cmd)
            delivered += 1
        return delivered

    # ---- tools, as an agent calls them
    def create(self, agent_id: str, objective: str = "Root work") -> str:
        wid = self.new_id("wi_")
        self.apply(
            c.CreateWorkItem(
                command_id=self.new_id("cmd_"),
                agent_id=agent_id,
                args={"objective": objective},  # type: ignore[arg-type]
                work_item_id=wid,
                plan_artifact=make_plan_artifact(agent_id=agent_id, item_id=wid),
            )
        )
        return wid

    def pick(self, agent_id: str, work_item_id: str) -> None:
        self.tool(agent_id, c.PickWorkItem, {"work_item_id": work_item_id})

    def tool(self, agent_id: str, cls: type[c.ToolCommand], args: dict[str, Any], **kw: Any) -> Any:
        cmd = cls.model_validate(
            {"command_id": self.new_id("cmd_"), "agent_id": agent_id, "args": args, **kw}
        )
        return self.apply(cmd)

    def delegate(
        self,
        agent_id: str,
        to_agent: str,
        objective: str = "Sub work",
        acceptance: list[dict[str, Any]] | None = None,
        deadline_s: int | None = None,
    ) -> Any:
        child = self.new_id("wi_")
        args: dict[str, Any] = {
            "to_agent": to_agent,
            "objective": objective,
            "reason": "needs a specialist",
        }
        if deadline_s is not None:
            args["deadline_s"] = deadline_s
        return self.tool(
            agent_id,
            c.DelegateWorkItem,
            {**args, "acceptance": acceptance or []},
            delegation_id=self.new_id("dlg_"),
            child_work_item_id=child,
            child_plan_artifact=make_plan_artifact(agent_id=to_agent, item_id=child),
        )

    def spawn(self, parent: str, message: str | None = "Find the flaky test", **args: Any) -> Any:
        """SpawnAgent as the gateway sends it (a private child by default)."""
        kind = args.pop("kind", "private_child")
        child = args.pop("agent_id", None) or f"{parent}--child-{next(self._ids):04x}"
        raw = {"kind": kind, "initial_message": message, "agent_id": child, **args}
        return self.tool(
            parent,
            c.SpawnAgent,
            {k: v for k, v in raw.items() if v is not None},
            child_agent_id=child,
            delegation_id=self.new_id("dlg_") if kind == "private_child" else None,
            child_spec={"instructions": "child"},
            agent_token_hash="a" * 64,
            callback_token_hash="b" * 64,
        )

    def open_turn(self, agent_id: str) -> None:
        """What BeginTurn records: the turn shows the agent's inbox."""
        state = self.states[agent_id]
        agent = state.require_agent()
        shown = tuple(m.id for m in self.inbox.get(agent_id, []))
        self.states[agent_id] = state.with_agent(agent.model_copy(update={"turn_inbox": shown}))

    def complete(self, agent_id: str, work_item_id: str, report: str = "done it") -> Any:
        return self.tool(
            agent_id, c.CompleteWorkItem, {"work_item_id": work_item_id}, report_text=report
        )

    def item(self, agent_id: str, work_item_id: str) -> WorkItem:
        return self.states[agent_id].items[work_item_id]

    def delegated_items(self, agent_id: str) -> list[WorkItem]:
        return [i for i in self.states[agent_id].items.values() if i.delegated_from is not None]
