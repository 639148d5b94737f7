"""The AsyncAPI 3.0 document of every stream in docs/streams.md, its message schemas generated
from the pydantic models that encode and validate them."""

from __future__ import annotations

import inspect
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from services.ingress.schemas import CallbackEntry, DeadLetterEntry, WakeEntry
from shared.wire.commands import COMMANDS
from shared.wire.events import EVENTS, LedgerEvents
from shared.wire.message import Message
from shared.wire.replies import CommandReply
from shared.wire.ticks import Tick

REF = "#/components/schemas/{model}"
ENVELOPE_FIELDS = "the entry's field `m` holds this envelope as JSON (shared.wire.codec)"


class TimerMember(BaseModel):
    """A member of `<prefix>:{pNNN}:timers` (a sorted set; the score is the due time in ms)."""

    agent_id: str
    wait_id: str | None = None
    work_item_id: str | None = None


class TimerFiredEntry(BaseModel):
    """An entry of `<prefix>:{pNNN}:timers-fired`, moved there atomically when due."""

    m: str
    """The timer member (TimerMember) as JSON."""
    due: str
    """The member's score: the due time in milliseconds since the epoch."""


class CheckRequestEntry(BaseModel):
    """An entry of `<prefix>:check-requests`: a `command` acceptance check to run."""

    m: str
    """The request as JSON: {agent_id, work_item_id, attempt, check_index, run, timeout_s,
    expect}; answered by a `record_verdict` command whose id is
    `verdict:<work_item_id>:a<attempt>:c<check_index>`."""


PLAIN: dict[str, type[BaseModel]] = {
    "callback_entry": CallbackEntry,
    "check_request_entry": CheckRequestEntry,
    "wake_entry": WakeEntry,
    "dead_letter_entry": DeadLetterEntry,
    "timer_member": TimerMember,
    "timer_fired_entry": TimerFiredEntry,
}

# channel id -> (address, description, message names, operation action, who acts)
CHANNELS: dict[str, tuple[str, str, list[str], str, str]] = {
    "commands": (
        "{prefix}:{partition}:commands",
        "Ledger commands, partitioned by agent; consumer group `ledger`.",
        [c.message_type for c in COMMANDS],
        "receive",
        "The ledger applies each command exactly once and answers on the sender's reply_to.",
    ),
    "replies": (
        "{prefix}:replies:{process}",
        "One reply stream per waiting process; read with XREAD, no group.",
        [CommandReply.message_type],
        "send",
        "The ledger answers every command that names a reply stream.",
    ),
    "events": (
        "{prefix}:{partition}:events",
        "Ledger events (field `k` = agent id); consumer group `scheduler`.",
        [LedgerEvents.message_type],
        "send",
        "The ledger appends the history events each applied command produced.",
    ),
    "ticks": (
        "{prefix}:{partition}:ticks",
        "Ticks (field `k` = agent id); consumer group `turn-executor`.",
        [Tick.message_type],
        "send",
        "The scheduler wakes one agent; at most one tick is outstanding per agent.",
    ),
    "timers": (
        "{prefix}:{partition}:timers",
        "A sorted set, not a stream: members are due timers, scores their due time in ms.",
        ["timer_member"],
        "send",
        "The scheduler schedules a timer on a `timer_scheduled` event.",
    ),
    "timersFired": (
        "{prefix}:{partition}:timers-fired",
        "Due timers moved out of the timer set atomically; consumer group `scheduler`.",
        ["timer_fired_entry"],
        "send",
        "lr_timers_due moves due members here; the scheduler turns them into commands.",
    ),
    "wakes": (
        "{prefix}:wakes",
        "Ticks for agents with `loop: external`, for the agent's own loop (its own group).",
        ["wake_entry"],
        "send",
        "The scheduler publishes each tick of an external-loop agent.",
    ),
    "callbacks": (
        "{prefix}:callbacks",
        "Callbacks pushed without HTTP (docs/contract.md §7); consumer group `ingress`.",
        ["callback_entry"],
        "receive",
        "Ingress checks each entry like POST /v1/callbacks/{token} and records it once.",
    ),
    "checkRequests": (
        "{prefix}:check-requests",
        "`command` acceptance checks to run; consumer group `check-runners` (turn executors).",
        ["check_request_entry"],
        "send",
        "The scheduler asks once per awaited command check of a verifying attempt.",
    ),
    "deadLetter": (
        "{prefix}:dead-letter",
        "Entries no consumer could use: original fields plus reason, source_stream, source_id.",
        ["dead_letter_entry"],
        "send",
        "Any consumer moves an entry here instead of stopping on it.",
    ),
}


def _summary(cls: type[BaseModel]) -> str:
    doc = inspect.getdoc(cls) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ") or cls.__name__


def _envelope(cls: type[Message], body_ref: dict[str, Any]) -> dict[str, Any]:
    nullable = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["id", "type", "version", "at", "body"],
        "properties": {
            "id": {"type": "string", "minLength": 1},
            "type": {"const": cls.message_type},
            "version": {"const": cls.version},
            "at": {"type": "string", "format": "date-time"},
            "correlation_id": nullable,
            "causation_id": nullable,
            "body": body_ref,
        },
    }


def _messages() -> tuple[dict[str, Any], dict[str, Any]]:
    """(components.messages, components.schemas), all from the models."""
    typed: list[type[Message]] = [*COMMANDS, CommandReply, LedgerEvents, Tick, *EVENTS]
    models: list[type[BaseModel]] = [*typed, *PLAIN.values()]
    refs, defs = models_json_schema([(m, "validation") for m in models], ref_template=REF)
    messages: dict[str, Any] = {}
    for cls in typed:
        messages[cls.message_type] = {
            "name": cls.message_type,
            "title": cls.__name__,
            "summary": _summary(cls),
            "contentType": "application/json",
            "payload": _envelope(cls, refs[(cls, "validation")]),
            "x-stream-fields": {"m": ENVELOPE_FIELDS, "k": "the agent id, where the entry has one"},
        }
    for name, model in PLAIN.items():
        messages[name] = {
            "name": name,
            "title": model.__name__,
            "summary": _summary(model),
            "contentType": "application/octet-stream",
            "payload": refs[(model, "validation")],
            "x-stream-fields": "each property is one field of the stream entry",
        }
    return messages, defs.get("$defs", {})


def _parameters(address: str, prefix: str) -> dict[str, Any]:
    known = {
        "prefix": {"description": "LONGRUN_PREFIX.", "default": prefix, "examples": [prefix]},
        "partition": {
            "description": "The partition hash tag, braces included: `{p000}` to `{pNNN}` "
            "for crc32(agent_id) % LONGRUN_PARTITIONS.",
            "examples": ["{p000}"],
        },
        "process": {"description": "The sending process's random reply-stream id."},
    }
    return {name: spec for name, spec in known.items() if "{" + name + "}" in address}


def _server(redis_url: str) -> dict[str, Any]:
    parts = urlsplit(redis_url)
    host = f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"
    return {"host": host, "protocol": "redis", "description": "REDIS_URL (credentials omitted)."}


def asyncapi_document(*, prefix: str, redis_url: str, version: str) -> dict[str, Any]:
    messages, schemas = _messages()
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for channel_id, (address, description, names, action, summary) in CHANNELS.items():
        channels[channel_id] = {
            "address": address,
            "description": description,
            "parameters": _parameters(address, prefix),
            "messages": {n: {"$ref": f"#/components/messages/{n}"} for n in names},
        }
        operations[f"{action}_{channel_id}"] = {
            "action": action,
            "channel": {"$ref": f"#/channels/{channel_id}"},
            "summary": summary,
            "messages": [{"$ref": f"#/channels/{channel_id}/messages/{n}"} for n in names],
        }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "longrun streams",
            "version": version,
            "description": "Every Redis stream between longrun's services and the systems "
            "around them (docs/streams.md). Envelope messages travel as JSON in field `m`.",
        },
        "defaultContentType": "application/json",
        "servers": {"redis": _server(redis_url)},
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": schemas},
    }
