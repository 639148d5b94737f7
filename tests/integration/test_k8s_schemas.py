"""The Kubernetes manifests are valid against the Kubernetes API schemas (kubernetes-validate,
strict, with the schemas it ships: no network), and the KEDA scaler watches the tick streams and
consumer group that docs/streams.md documents."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
# Custom resources: their schemas come with KEDA and kustomize, not with Kubernetes.
NOT_KUBERNETES = {("keda.sh/v1alpha1", "ScaledObject"),
                  ("kustomize.config.k8s.io/v1beta1", "Kustomization")}  # fmt: skip


def manifests() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}:{n}", doc)
        for path in sorted(K8S.glob("*.yaml"))
        for n, doc in enumerate(yaml.safe_load_all(path.read_text()))
        if doc
    ]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in manifests() if doc["kind"] == kind]


@pytest.mark.parametrize(("where", "doc"), manifests(), ids=[w for w, _ in manifests()])
def test_manifest_is_valid_against_the_kubernetes_schemas(where: str, doc: dict[str, Any]) -> None:
    if (doc["apiVersion"], doc["kind"]) in NOT_KUBERNETES:
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
        return
    try:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{where} ({doc['kind']}): {exc.message} at {list(exc.path)}")


def test_the_validator_rejects_a_broken_manifest() -> None:
    (deployment,) = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "ledger"]
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


def documented_stream(producer: str) -> tuple[str, str]:
    """(stream pattern, consumer group) of the row of docs/streams.md's stream table whose
    stream ends with `producer`'s suffix, e.g. `:ticks`."""
    rows = re.findall(
        r"^\| `([^`]+)` \| [^|]+ \| `([^`]+)` \|", (ROOT / "docs" / "streams.md").read_text(), re.M
    )
    (row,) = [(stream, group) for stream, group in rows if stream.endswith(producer)]
    return row


def test_keda_watches_the_documented_tick_streams_and_group() -> None:
    pattern, group = documented_stream(":ticks")
    assert pattern == "lr:{pNNN}:ticks", pattern
    (config,) = [c for c in of_kind("ConfigMap") if c["metadata"]["name"] == "longrun-config"]
    prefix, partitions = config["data"]["LONGRUN_PREFIX"], int(config["data"]["LONGRUN_PARTITIONS"])
    expected = [
        pattern.replace("lr:", f"{prefix}:", 1).replace("NNN", f"{p:03d}")
        for p in range(partitions)
    ]
    (scaled,) = of_kind("ScaledObject")
    triggers = scaled["spec"]["triggers"]
    assert [t["metadata"]["stream"] for t in triggers] == expected
    assert {t["metadata"]["consumerGroup"] for t in triggers} == {group}
    redis = {t["metadata"]["address"] for t in triggers}
    (service,) = [s for s in of_kind("Service") if s["metadata"]["name"] == "redis"]
    ns = service["metadata"]["namespace"]
    assert redis == {f"redis.{ns}.svc:{service['spec']['ports'][0]['port']}"}
