"""The deployment files agree with the code: docker-compose.yml, deploy/k8s, Prometheus, Grafana
and the Dockerfile name real modules, the services' ports and only environment variables the
settings classes read. These checks parse the files; tests/docker builds and runs them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from services.ingress.settings import IngressSettings
from services.ledger.app import LedgerSettings
from services.scheduler.app import SchedulerSettings
from services.turn_executor.app import ExecutorSettings
from shared.metrics import build_metrics
from shared.settings import CommonSettings
from shared.wire.names import Group, Names

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"

# compose service / k8s Deployment -> (module, settings class, port env, default port)
SERVICES: dict[str, tuple[str, type[CommonSettings], str, int]] = {
    "ingress": ("services.ingress", IngressSettings, "LONGRUN_HTTP_PORT", 8080),
    "ledger": ("services.ledger", LedgerSettings, "LONGRUN_LEDGER_PORT", 9101),
    "scheduler": ("services.scheduler", SchedulerSettings, "LONGRUN_SCHEDULER_PORT", 9102),
    "turn-executor": ("services.turn_executor", ExecutorSettings, "LONGRUN_EXECUTOR_PORT", 9103),
}
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - ingress must be reachable from outside its container
CONTRACT_ENV = {
    "REDIS_URL", "LONGRUN_PREFIX", "LONGRUN_PARTITIONS", "LONGRUN_AGENT_HOME",
    "LONGRUN_MAX_WAKE_CYCLES", "LONGRUN_MAX_BODY_BYTES", "LONGRUN_PROVIDER",
    "LONGRUN_OPENAI_BASE_URL", "LONGRUN_OPENAI_API_KEY", "LONGRUN_MODEL", "LONGRUN_PUBLIC_URL",
}  # fmt: skip
CONTRACT_FAMILIES = {
    "http_requests_total", "callbacks_total", "ledger_commands_total", "ledger_command_seconds",
    "scheduler_ticks_total", "wake_budget_exhausted_total", "turns_total", "turn_seconds",
    "tool_calls_total", "callback_to_tick_seconds", "stream_pending", "work_items",
}  # fmt: skip


def env_names(settings: type[BaseSettings]) -> dict[str, str]:
    """Environment variable -> field, as pydantic-settings reads them (prefix or alias)."""
    names = {}
    for name, info in settings.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names.update({str(c): name for c in alias.choices if str(c).isupper()})
        else:
            names["LONGRUN_" + name.upper()] = name
    return names


def default_port(service: str) -> int:
    _, settings, port_env, _ = SERVICES[service]
    return int(settings.model_fields[env_names(settings)[port_env]].default)


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


@pytest.fixture(scope="module")
def k8s() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in load_all(path)]


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def test_the_port_table_matches_the_settings_defaults() -> None:
    for service, (module, settings, _, port) in SERVICES.items():
        assert default_port(service) == port, service
        assert (ROOT / module.replace(".", "/") / "__main__.py").exists(), module
        assert set(env_names(CommonSettings)) <= set(env_names(settings))
    assert set(env_names(CommonSettings)) >= CONTRACT_ENV


# ---------------------------------------------------------------- docker compose


def test_compose_runs_redis_with_aof_and_noeviction(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    assert "./deploy/redis.conf:/usr/local/etc/redis/redis.conf:ro" in redis["volumes"]
    assert redis["command"][-1] == "/usr/local/etc/redis/redis.conf"
    conf = (ROOT / "deploy" / "redis.conf").read_text().splitlines()
    assert "appendonly yes" in conf
    assert "appendfsync everysec" in conf
    assert "maxmemory-policy noeviction" in conf


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_compose_service_runs_its_module_with_known_env(
    compose: dict[str, Any], service: str
) -> None:
    module, settings, port_env, port = SERVICES[service]
    spec = compose["services"][service]
    assert spec["command"] == [module]
    assert spec["build"]["dockerfile"] == "deploy/Dockerfile"
    env = spec["environment"]
    assert set(env) <= set(env_names(settings)), set(env) - set(env_names(settings))
    assert CONTRACT_ENV | {"LONGRUN_OPERATOR_TOKEN"} <= set(env)
    assert env[port_env] == str(port)
    assert env["REDIS_URL"].startswith("redis://redis:6379")
    assert f"127.0.0.1:{port}/readyz" in " ".join(spec["healthcheck"]["test"])
    assert spec["depends_on"]["redis"]["condition"] == "service_healthy"


def test_compose_scales_executors_and_publishes_ingress(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["turn-executor"]["deploy"]["replicas"] >= 2
    assert services["ingress"]["environment"]["LONGRUN_HTTP_HOST"] == ALL_INTERFACES
    for service in ("ingress", "turn-executor"):  # both write plan files
        assert "agent-home:/var/lib/longrun/home" in services[service]["volumes"]
    # Published ports live in the override compose reads by default, so the tests' host-network
    # override (which cannot remove a list) can leave them out.
    assert all("ports" not in spec for spec in services.values())
    published = yaml.safe_load((ROOT / "docker-compose.override.yml").read_text())["services"]
    assert "turn-executor" not in published  # replicas cannot share a host port
    assert published["ingress"]["ports"] == ["8080:8080"]
    assert published["redis"]["ports"] == ["127.0.0.1:6379:6379"]


ARCHIVE = "/var/lib/longrun/archive"


def test_compose_keeps_the_archive_on_a_volume_the_ledger_never_mounts(
    compose: dict[str, Any],
) -> None:
    """The scheduler writes the archive, ingress and the executors read it (contract §23); the
    ledger does no file I/O, so it has no way to."""
    services = compose["services"]
    assert compose["x-longrun"]["environment"]["LONGRUN_ARCHIVE_DIR"] == ARCHIVE
    assert "archive" in compose["volumes"]
    assert f"archive:{ARCHIVE}" in services["scheduler"]["volumes"]
    for reader in ("ingress", "turn-executor"):
        assert f"archive:{ARCHIVE}:ro" in services[reader]["volumes"]
    assert not any("archive" in volume for volume in services["ledger"].get("volumes", []))


def test_host_network_override_moves_every_service_to_loopback(compose: dict[str, Any]) -> None:
    hostnet = yaml.safe_load((ROOT / "deploy" / "compose.hostnet.yml").read_text())["services"]
    assert set(hostnet) == {"redis", *SERVICES}
    for service, spec in hostnet.items():
        assert spec["network_mode"] == "host", service
        assert "ports" not in spec, service
    for service, (_, settings, port_env, port) in SERVICES.items():
        env = hostnet[service]["environment"]
        assert set(env) <= set(env_names(settings)), set(env) - set(env_names(settings))
        assert env["REDIS_URL"] == "redis://127.0.0.1:${LR_REDIS_PORT:-6379}/0"
        assert env[port_env] == f"${{LR_{service.split('-')[-1].upper()}_PORT:-{port}}}"
        probe = " ".join(hostnet[service]["healthcheck"]["test"])
        assert f"127.0.0.1:{env[port_env]}/readyz" in probe


def test_prometheus_scrapes_every_service_on_its_port(compose: dict[str, Any]) -> None:
    prometheus = compose["services"]["prometheus"]
    assert "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus["volumes"]
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(SERVICES)
    for service, job in jobs.items():
        (sd,) = job["dns_sd_configs"]
        assert sd["names"] == [service]
        assert sd["port"] == default_port(service)
        assert job["metrics_path"] == "/metrics"


# ---------------------------------------------------------------- kubernetes


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def probe_target(probe: dict[str, Any], port: int) -> str:
    """The path a probe checks, whether an httpGet or a command inside the container."""
    if "httpGet" in probe:
        assert probe["httpGet"]["port"] in ("http", port)
        return str(probe["httpGet"]["path"])
    command = " ".join(probe["exec"]["command"])
    found = re.search(rf"http://127\.0\.0\.1:{port}(/\w+)", command)
    assert found, command
    return found.group(1)


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_deployment_runs_its_module_with_probes(k8s: list[dict[str, Any]], service: str) -> None:
    module, settings, port_env, port = SERVICES[service]
    spec = container(of_kind(k8s, "Deployment")[service])
    assert spec["args"] == [module]
    assert spec["ports"] == [{"name": "http", "containerPort": port}]
    assert probe_target(spec["readinessProbe"], port) == "/readyz"
    assert probe_target(spec["livenessProbe"], port) == "/healthz"
    env = {item["name"]: item.get("value", item.get("valueFrom")) for item in spec["env"]}
    assert env[port_env] == str(port)
    assert set(env) <= set(env_names(settings)), set(env) - set(env_names(settings))
    refs = {next(iter(ref.values()))["name"] for ref in spec["envFrom"]}
    assert refs == {"longrun-config", "longrun-secrets"}
    annotations = of_kind(k8s, "Deployment")[service]["spec"]["template"]["metadata"]
    assert annotations["annotations"]["prometheus.io/port"] == str(port)


def test_the_ledger_reads_its_signing_key_from_an_optional_secret(
    k8s: list[dict[str, Any]],
) -> None:
    spec = container(of_kind(k8s, "Deployment")["ledger"])
    env = {item["name"]: item for item in spec["env"]}
    ref = env["LONGRUN_SIGNING_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "longrun-signing-key", "key": "key", "optional": True}


def test_config_and_secret_hold_only_common_settings(k8s: list[dict[str, Any]]) -> None:
    config = of_kind(k8s, "ConfigMap")["longrun-config"]["data"]
    secret = of_kind(k8s, "Secret")["longrun-secrets"]["stringData"]
    assert set(config) | set(secret) <= set(env_names(CommonSettings))
    assert set(config) | set(secret) >= CONTRACT_ENV
    assert set(secret) == {
        "LONGRUN_OPERATOR_TOKEN", "LONGRUN_OPENAI_API_KEY", "LONGRUN_WEBHOOK_SECRET",
    }  # fmt: skip
    assert config["LONGRUN_PARTITIONS"] == str(CommonSettings.model_fields["partitions"].default)


def test_k8s_mounts_the_archive_claim_where_the_config_points(
    k8s: list[dict[str, Any]],
) -> None:
    config = of_kind(k8s, "ConfigMap")["longrun-config"]["data"]
    claim = of_kind(k8s, "PersistentVolumeClaim")["longrun-archive"]["spec"]
    assert claim["accessModes"] == ["ReadWriteMany"]  # replicas on several nodes
    deployments = of_kind(k8s, "Deployment")
    for service, read_only in (("scheduler", False), ("ingress", True), ("turn-executor", True)):
        pod = deployments[service]["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["archive"]["persistentVolumeClaim"]["claimName"] == "longrun-archive"
        (mount,) = [
            m for m in container(deployments[service])["volumeMounts"] if m["name"] == "archive"
        ]
        assert mount["mountPath"] == config["LONGRUN_ARCHIVE_DIR"] == ARCHIVE
        assert mount.get("readOnly", False) is read_only
    ledger = deployments["ledger"]["spec"]["template"]["spec"]
    assert "archive" not in {v["name"] for v in ledger.get("volumes", [])}


def test_ingress_has_a_service_on_its_http_port(k8s: list[dict[str, Any]]) -> None:
    service = of_kind(k8s, "Service")["ingress"]["spec"]
    assert service["selector"] == {"app.kubernetes.io/name": "ingress"}
    assert service["ports"][0]["targetPort"] == "http"
    env = {e["name"]: e["value"] for e in container(of_kind(k8s, "Deployment")["ingress"])["env"]}
    assert env["LONGRUN_HTTP_HOST"] == ALL_INTERFACES


def test_keda_scales_executors_on_every_tick_partition(k8s: list[dict[str, Any]]) -> None:
    scaled = of_kind(k8s, "ScaledObject")["turn-executor"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == "turn-executor"
    names = Names(prefix="lr", partitions=CommonSettings.model_fields["partitions"].default)
    triggers = scaled["triggers"]
    assert {t["type"] for t in triggers} == {"redis-streams"}
    assert {t["metadata"]["consumerGroup"] for t in triggers} == {Group.EXECUTOR}
    assert [t["metadata"]["stream"] for t in triggers] == [
        names.ticks(p) for p in range(names.partitions)
    ]
    formula = scaled["advanced"]["scalingModifiers"]["formula"]
    assert formula.split(" + ") == [t["name"] for t in triggers]


def test_k8s_redis_config_is_deploy_redis_conf(k8s: list[dict[str, Any]]) -> None:
    embedded = of_kind(k8s, "ConfigMap")["redis-config"]["data"]["redis.conf"]
    assert embedded == (ROOT / "deploy" / "redis.conf").read_text()


def test_kustomization_lists_every_manifest() -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


# ---------------------------------------------------------------- dashboard and image


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exposed_names() -> set[str]:
    """The sample names shared.metrics exposes, without the `longrun_` prefix."""
    registry = CollectorRegistry()
    build_metrics(registry)
    return {
        family.name.removeprefix("longrun_") + suffix
        for family in registry.collect()
        for suffix in SUFFIXES[family.type]
    }


def test_dashboard_covers_every_metric_family_and_only_real_ones() -> None:
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "longrun-dashboard.json").read_text())
    exprs = " ".join(
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    )
    used = set(re.findall(r"longrun_(\w+)", exprs))
    assert used <= exposed_names(), used - exposed_names()
    for family in CONTRACT_FAMILIES:
        assert any(name == family or name.startswith(family + "_") for name in used), family


def test_dockerfile_builds_a_small_image_on_a_chosen_base() -> None:
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim" in text
    # Two stages on the same base: the virtualenv is built in one and copied into the other.
    assert text.count("FROM ${BASE_IMAGE}") == 2
    assert "COPY --from=build /opt/longrun /opt/longrun" in text
    assert "USER longrun" in text
    assert 'ENTRYPOINT ["longrun-entrypoint"]' in text
    assert "COPY deploy/entrypoint.sh /usr/local/bin/longrun-entrypoint" in text
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert {"!shared/**", "!services/**", "!pyproject.toml", "!deploy/entrypoint.sh"} <= set(ignore)


def test_compose_and_k8s_give_the_scheduler_a_webhook_secret(
    compose: dict[str, Any], k8s: list[dict[str, Any]]
) -> None:
    """Out of the box a webhook check can be signed: compose refuses to start without a secret
    (as without an operator token); the Kubernetes Secret holds one for every service."""
    env = compose["services"]["scheduler"]["environment"]
    assert env["LONGRUN_WEBHOOK_SECRET"].startswith("${LONGRUN_WEBHOOK_SECRET:?")
    assert env["LONGRUN_WEBHOOK_ALLOW"] == "${LONGRUN_WEBHOOK_ALLOW:-}"
    assert "LONGRUN_WEBHOOK_ALLOW" in compose["services"]["ledger"]["environment"]
    assert "LONGRUN_WEBHOOK_SECRET" in of_kind(k8s, "Secret")["longrun-secrets"]["stringData"]
    assert "LONGRUN_WEBHOOK_ALLOW" in of_kind(k8s, "ConfigMap")["longrun-config"]["data"]
    scheduler = container(of_kind(k8s, "Deployment")["scheduler"])
    refs = {next(iter(r.values()))["name"] for r in scheduler["envFrom"]}
    assert "longrun-secrets" in refs
