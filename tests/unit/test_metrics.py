"""Metric families of docs/contract.md §9, as a scraper sees them on /metrics."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from shared.metrics import Metrics, build_metrics

# (attribute on Metrics, exposed sample name, kind, label names): the contract's table.
CONTRACT_FAMILIES: tuple[tuple[str, str, str, frozenset[str]], ...] = (
    ("http_requests", "longrun_http_requests_total", "counter", frozenset({"route", "status"})),
    ("callbacks", "longrun_callbacks_total", "counter", frozenset({"outcome"})),
    (
        "ledger_commands",
        "longrun_ledger_commands_total",
        "counter",
        frozenset({"command", "outcome"}),
    ),
    ("ledger_command_seconds", "longrun_ledger_command_seconds", "histogram", frozenset()),
    ("scheduler_ticks", "longrun_scheduler_ticks_total", "counter", frozenset({"kind"})),
    ("wake_budget_exhausted", "longrun_wake_budget_exhausted_total", "counter", frozenset()),
    ("turns", "longrun_turns_total", "counter", frozenset({"outcome"})),
    ("turn_seconds", "longrun_turn_seconds", "histogram", frozenset()),
    ("tool_calls", "longrun_tool_calls_total", "counter", frozenset({"tool", "status"})),
    ("callback_to_tick_seconds", "longrun_callback_to_tick_seconds", "histogram", frozenset()),
    ("stream_pending", "longrun_stream_pending", "gauge", frozenset({"stream", "group"})),
    ("work_items", "longrun_work_items", "gauge", frozenset({"readiness"})),
    (
        "model_calls",
        "longrun_model_calls_total",
        "counter",
        frozenset({"provider", "model", "outcome"}),
    ),
    (
        "model_tokens",
        "longrun_model_tokens_total",
        "counter",
        frozenset({"provider", "model", "kind"}),
    ),
    (
        "model_call_seconds",
        "longrun_model_call_seconds",
        "histogram",
        frozenset({"provider", "model"}),
    ),
)


def _touch(metric: Any, kind: str, labels: frozenset[str]) -> None:
    target = metric.labels(**{name: "x" for name in sorted(labels)}) if labels else metric
    if kind == "counter":
        target.inc()
    elif kind == "gauge":
        target.set(3)
    else:
        target.observe(0.004)


def _scrape(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)], parsed back from the Prometheus text format."""
    text = generate_latest(registry).decode("utf-8")
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def _touched() -> tuple[CollectorRegistry, Metrics]:
    registry = CollectorRegistry()
    metrics = build_metrics(registry)
    for attribute, _, kind, labels in CONTRACT_FAMILIES:
        _touch(getattr(metrics, attribute), kind, labels)
    return registry, metrics


@pytest.mark.parametrize(
    ("attribute", "sample", "kind", "labels"),
    [pytest.param(*family, id=family[1]) for family in CONTRACT_FAMILIES],
)
def test_every_contract_family_is_exposed_with_its_name_and_labels(
    attribute: str, sample: str, kind: str, labels: frozenset[str]
) -> None:
    registry, _ = _touched()
    samples = _scrape(registry)
    text = generate_latest(registry).decode("utf-8")

    assert f"# TYPE {sample} {kind}" in text
    if kind == "histogram":
        assert [frozenset(labels_) for labels_, _ in samples[f"{sample}_count"]] == [labels]
        assert [value for _, value in samples[f"{sample}_count"]] == [1.0]
        assert {frozenset(labels_) for labels_, _ in samples[f"{sample}_bucket"]} == {
            labels | {"le"}
        }
    else:
        assert [(frozenset(labels_), value) for labels_, value in samples[sample]] == [
            (labels, 3.0 if kind == "gauge" else 1.0)
        ]


def test_contract_outcome_values_are_accepted() -> None:
    registry = CollectorRegistry()
    metrics = build_metrics(registry)
    for outcome in ("completed", "waiting", "yielded", "failed", "interrupted"):
        metrics.turns.labels(outcome=outcome).inc()
    for outcome in ("triggered", "duplicate", "delivered_to_inbox", "rejected"):
        metrics.callbacks.labels(outcome=outcome).inc()
    for outcome in ("applied", "duplicate", "rejected"):
        metrics.ledger_commands.labels(command="create_work_item", outcome=outcome).inc()
    samples = _scrape(registry)
    assert len(samples["longrun_turns_total"]) == 5
    assert len(samples["longrun_callbacks_total"]) == 4
    assert len(samples["longrun_ledger_commands_total"]) == 3


def test_families_are_declared_before_any_sample() -> None:
    """A scraper sees every family (HELP/TYPE) on a fresh registry, before anything happens."""
    registry = CollectorRegistry()
    build_metrics(registry)
    text = generate_latest(registry).decode("utf-8")
    for _, sample, kind, _ in CONTRACT_FAMILIES:
        assert f"# TYPE {sample} {kind}" in text


def test_two_registries_are_independent() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    one, two = build_metrics(first), build_metrics(second)

    one.turns.labels(outcome="completed").inc(2)
    one.wake_budget_exhausted.inc()
    two.turns.labels(outcome="failed").inc()

    first_samples, second_samples = _scrape(first), _scrape(second)
    assert first_samples["longrun_turns_total"] == [({"outcome": "completed"}, 2.0)]
    assert second_samples["longrun_turns_total"] == [({"outcome": "failed"}, 1.0)]
    assert first_samples["longrun_wake_budget_exhausted_total"] == [({}, 1.0)]
    assert second_samples["longrun_wake_budget_exhausted_total"] == [({}, 0.0)]


def test_a_registry_takes_the_families_once() -> None:
    registry = CollectorRegistry()
    build_metrics(registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        build_metrics(registry)
