"""The Prometheus metric families of docs/contract.md §9, declared once against a registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Collector pauses: most young collections take well under a millisecond; the ones worth an
# alert stall the event loop for tens of milliseconds.
_GC_BUCKETS = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
# Model calls take from a fraction of a second to minutes (long answers, slow endpoints). They
# carry no per-agent label (the usage route answers per agent); `outcome` is success |
# transient | permanent | error, one count per attempt.
_MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
# Latency buckets from 0.5 ms to 10 s: command apply and tick latency live at the low end,
# whole turns (model calls) at the high end.
_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True, slots=True)
class Metrics:
    http_requests: Counter
    callbacks: Counter
    ledger_commands: Counter
    ledger_command_seconds: Histogram
    scheduler_ticks: Counter
    wake_budget_exhausted: Counter
    turns: Counter
    turn_seconds: Histogram
    tool_calls: Counter
    callback_to_tick_seconds: Histogram
    stream_pending: Gauge
    work_items: Gauge
    liveness_repairs: Counter
    dead_lettered: Counter
    gc_pauses: Histogram
    mcp_errors: Counter
    mcp_calls: Counter
    mcp_call_seconds: Histogram
    model_calls: Counter
    model_tokens: Counter
    model_call_seconds: Histogram
    archived: Counter
    archive_failures: Counter


def build_metrics(registry: CollectorRegistry) -> Metrics:
    """Declare every family on `registry` (a fresh one per process, or per test)."""
    p = "longrun_"
    return Metrics(
        http_requests=Counter(
            p + "http_requests", "HTTP requests served", ["route", "status"], registry=registry
        ),
        callbacks=Counter(
            p + "callbacks", "Callbacks received by outcome", ["outcome"], registry=registry
        ),
        ledger_commands=Counter(
            p + "ledger_commands",
            "Ledger commands by type and outcome (applied | duplicate | rejected)",
            ["command", "outcome"],
            registry=registry,
        ),
        ledger_command_seconds=Histogram(
            p + "ledger_command_seconds",
            "Time to apply one ledger command",
            buckets=_BUCKETS,
            registry=registry,
        ),
        scheduler_ticks=Counter(
            p + "scheduler_ticks", "Ticks published by kind", ["kind"], registry=registry
        ),
        wake_budget_exhausted=Counter(
            p + "wake_budget_exhausted",
            "Agents parked by an exhausted wake budget",
            registry=registry,
        ),
        turns=Counter(p + "turns", "Turns by outcome", ["outcome"], registry=registry),
        turn_seconds=Histogram(
            p + "turn_seconds", "Wall time of one turn", buckets=_BUCKETS, registry=registry
        ),
        tool_calls=Counter(
            p + "tool_calls",
            "Tool calls by tool and status",
            ["tool", "status"],
            registry=registry,
        ),
        callback_to_tick_seconds=Histogram(
            p + "callback_to_tick_seconds",
            "Time from an accepted callback to the tick it caused",
            buckets=_BUCKETS,
            registry=registry,
        ),
        stream_pending=Gauge(
            p + "stream_pending",
            "Entries pending in a consumer group",
            ["stream", "group"],
            registry=registry,
        ),
        work_items=Gauge(
            p + "work_items", "WorkItems by readiness", ["readiness"], registry=registry
        ),
        liveness_repairs=Counter(
            p + "liveness_repairs",
            "Orphaned WorkItems repaired by the watchdog",
            ["kind"],
            registry=registry,
        ),
        dead_lettered=Counter(
            p + "dead_lettered",
            "Entries moved to the dead-letter stream",
            ["stream", "reason"],
            registry=registry,
        ),
        gc_pauses=Histogram(
            p + "gc_pause_seconds",
            "Time the cyclic garbage collector held the process, by generation",
            ["generation"],
            buckets=_GC_BUCKETS,
            registry=registry,
        ),
        mcp_errors=Counter(
            p + "mcp_errors",
            "MCP servers that could not be reached, listed or called, by kind",
            ["server", "kind"],
            registry=registry,
        ),
        mcp_calls=Counter(
            p + "mcp_calls",
            "MCP tool calls by outcome (ok | error | timeout)",
            ["server", "outcome"],
            registry=registry,
        ),
        mcp_call_seconds=Histogram(
            p + "mcp_call_seconds",
            "Wall time of one MCP tool call",
            ["server"],
            buckets=_BUCKETS,
            registry=registry,
        ),
        model_calls=Counter(
            p + "model_calls",
            "Model call attempts by provider, model and outcome",
            ["provider", "model", "outcome"],
            registry=registry,
        ),
        model_tokens=Counter(
            p + "model_tokens",
            "Tokens of successful model calls by kind (input | cached_input | output)",
            ["provider", "model", "kind"],
            registry=registry,
        ),
        model_call_seconds=Histogram(
            p + "model_call_seconds",
            "Wall time of one model call attempt",
            ["provider", "model"],
            buckets=_MODEL_BUCKETS,
            registry=registry,
        ),
        archived=Counter(
            p + "archived",
            "What the archiver moved out of Redis, by kind (segments | events | work_items "
            "| briefs)",
            ["kind"],
            registry=registry,
        ),
        archive_failures=Counter(
            p + "archive_failures",
            "Archive passes that failed for an agent, by step (write | commit); retried on "
            "the next pass, the hot copies kept meanwhile",
            ["step"],
            registry=registry,
        ),
    )
