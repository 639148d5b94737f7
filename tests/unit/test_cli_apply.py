"""`longrun apply` and `longrun agent show` against a fake HTTP API that keeps specs the way the
ledger does (version, changed fields), and the agents file's `FILE:LINE: message` errors."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from services.cli.main import app
from services.cli.verbs import Connection
from shared.agents_file import AgentsFileError, parse_agents_file
from shared.domain.specs import AgentSpec, changed_fields, spec_document

TOKEN = "operator-secret"
README = Path(__file__).resolve().parents[2] / "README.md"


def readme_agents_file() -> str:
    """The two-agent file the README shows, so the example cannot rot."""
    found = re.search(r"```yaml\n# agents.yaml\n(.*?)```", README.read_text(), re.DOTALL)
    assert found is not None
    return found.group(1)


@dataclass
class SpecApi:
    """GET and PUT /v1/agents/{id} with spec versions; /usage when `usage` is set."""

    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    puts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.strip("/").split("/")
        if parts[1] == "presets":
            return self.preset(request, parts[2])
        agent_id = parts[2]
        if parts[3:] == ["usage"]:
            if self.usage is None:
                return httpx.Response(404, json={"error": {"kind": "not_found", "message": "?"}})
            return httpx.Response(200, json={"agent_id": agent_id, **self.usage})
        if request.method == "PUT":
            return self.put(agent_id, json.loads(request.content or b"{}"))
        if agent_id not in self.agents:
            missing = {"kind": "agent_not_found", "message": "no agent"}
            return httpx.Response(404, json={"error": missing})
        return httpx.Response(200, json=self.agents[agent_id])

    def preset(self, request: httpx.Request, name: str) -> httpx.Response:
        known = self.presets.get(name)
        if request.method == "GET":
            if known is None:
                missing = {"kind": "preset_not_found", "message": "no preset"}
                return httpx.Response(404, json={"error": missing})
            return httpx.Response(200, json=known)
        spec = spec_document(AgentSpec.model_validate(json.loads(request.content)["spec"]))
        self.puts.append((f"preset:{name}", {"spec": spec}))
        version = 1 if known is None else known["version"] + (known["spec"] != spec)
        self.presets[name] = {"name": name, "spec": spec, "version": version}
        return httpx.Response(201 if known is None else 200, json=self.presets[name])

    def put(self, agent_id: str, body: dict[str, Any]) -> httpx.Response:
        self.puts.append((agent_id, body))
        spec = AgentSpec.model_validate(body.get("spec") or {})
        known = self.agents.get(agent_id)
        if known is None:
            loop = body.get("loop") or "builtin"
            self.agents[agent_id] = {"loop": loop, "spec": spec_document(spec), "spec_version": 1}
            answer = {
                **self.agents[agent_id],
                "agent_id": agent_id,
                "agent_token": "tok-" + agent_id,
            }
            return httpx.Response(201, json=answer)
        if "spec" in body and changed_fields(AgentSpec.model_validate(known["spec"]), spec):
            known.update(spec=spec_document(spec), spec_version=known["spec_version"] + 1)
        return httpx.Response(200, json={**known, "agent_id": agent_id})


def run(api: SpecApi, *args: str) -> Any:
    env = {"LONGRUN_URL": "http://longrun.test", "LONGRUN_OPERATOR_TOKEN": TOKEN}
    obj = Connection(transport=httpx.MockTransport(api))
    return CliRunner().invoke(app, list(args), obj=obj, env=env)


@pytest.fixture
def agents_file(tmp_path: Path) -> Path:
    path = tmp_path / "agents.yaml"
    path.write_text(readme_agents_file())
    return path


def test_apply_creates_then_leaves_alone_then_updates(agents_file: Path) -> None:
    api = SpecApi()
    first = run(api, "apply", "-f", str(agents_file))
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines() == [
        "created reviewer",
        "agent-token reviewer tok-reviewer",
        "created triage",
        "agent-token triage tok-triage",
    ]
    assert api.agents["triage"]["spec"]["tools"]["mcp_servers"][0]["name"] == "github"
    again = run(api, "apply", "-f", str(agents_file))
    assert again.stdout.splitlines() == ["unchanged reviewer", "unchanged triage"]
    assert len(api.puts) == 2
    text = agents_file.read_text().replace("Be brief and concrete.", "Be thorough.")
    agents_file.write_text(text.replace("{team: payments}", "{team: web}", 1))
    updated = run(api, "apply", "-f", str(agents_file))
    assert updated.stdout.splitlines() == [
        "updated reviewer (instructions, labels)",
        "unchanged triage",
    ]
    assert api.agents["reviewer"]["spec_version"] == 2


def test_dry_run_prints_the_same_lines_and_changes_nothing(agents_file: Path) -> None:
    api = SpecApi()
    dry = run(api, "apply", "-f", str(agents_file), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines() == ["created reviewer", "created triage"]
    assert api.puts == []
    assert api.agents == {}


@pytest.mark.parametrize(
    ("mutate", "line", "words"),
    [
        (lambda t: t.replace("max_rounds_per_turn: 12", "max_rounds_per_turn: 500"), 5, "200"),
        (
            lambda t: t.replace("          transport: http", "          transport: ws"),
            13,
            "'http' or 'stdio'",
        ),
        (
            lambda t: t.replace("      mcp_servers:", "      mcp: []\n      mcp_servers:"),
            11,
            "tools.mcp",
        ),
        (
            lambda t: t.replace(
                "headers_from_env: {Authorization: GITHUB_MCP_AUTHORIZATION}",
                "headers: {Authorization: Bearer ghp_x}",
            ),
            15,
            "headers_from_env",
        ),
        (lambda t: t.replace("- id: triage", "- id: reviewer"), 7, "appears twice"),
        (lambda t: t + "- id: x\n  spec: [\n", 19, "not valid YAML"),
    ],
)
def test_a_bad_file_is_refused_with_its_line_before_anything_is_applied(
    agents_file: Path, mutate: Any, line: int, words: str
) -> None:
    agents_file.write_text(mutate(agents_file.read_text()))
    api = SpecApi()
    result = run(api, "apply", "-f", str(agents_file))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"{agents_file}:{line}: ")
    assert words in result.stderr
    assert api.puts == []


def test_a_loop_change_is_refused_before_anything_is_applied(agents_file: Path) -> None:
    api = SpecApi()
    api.agents["triage"] = {
        "loop": "external",
        "spec": spec_document(AgentSpec()),
        "spec_version": 1,
    }
    agents_file.write_text(
        agents_file.read_text().replace("- id: triage", "- id: triage\n  loop: builtin")
    )
    result = run(api, "apply", "-f", str(agents_file))
    assert result.exit_code == 1
    assert f"{agents_file}:7: agent 'triage' runs the external loop" in result.stderr
    assert api.puts == []


def test_parse_names_the_field_path() -> None:
    with pytest.raises(AgentsFileError) as caught:
        parse_agents_file("a.yaml", "- id: a\n- id: b\n  spec:\n    limits: {wake_budget: 0}\n")
    assert str(caught.value).startswith("a.yaml:4: agents[1].spec.limits.wake_budget: ")
    with pytest.raises(AgentsFileError, match=r"^a.yaml:1: expected a YAML list"):
        parse_agents_file("a.yaml", "id: a\n")


def test_agent_show_prints_spec_and_usage() -> None:
    api = SpecApi(usage={"turns": 3, "input_tokens": 1200})
    api.agents["bob"] = {
        "loop": "builtin",
        "spec": spec_document(AgentSpec(instructions="hi")),
        "spec_version": 1,
    }
    shown = run(api, "agent", "show", "bob")
    assert shown.exit_code == 0, shown.output
    body = json.loads(shown.stdout)
    assert body["spec"]["instructions"] == "hi"
    assert body["usage"]["input_tokens"] == 1200
    api.usage = None
    without = json.loads(run(api, "agent", "show", "bob").stdout)
    assert without["usage"] is None
    assert run(api, "agent", "show", "ghost").exit_code == 1


@pytest.mark.parametrize(
    ("written", "files"), [("true", True), ("false", False), ("yes", True), ("no", False)]
)
def test_a_yaml_boolean_sets_files(written: str, files: bool) -> None:
    text = f"- id: a\n  spec:\n    tools: {{files: {written}}}\n"
    [(_, entry)] = parse_agents_file("a.yaml", text)
    assert entry.spec is not None
    assert entry.spec.tools.files is files


def test_a_quoted_yes_is_refused_naming_the_field() -> None:
    with pytest.raises(AgentsFileError) as caught:
        parse_agents_file("a.yaml", '- id: a\n  spec:\n    tools: {files: "yes"}\n')
    assert str(caught.value).startswith("a.yaml:3: agents[0].spec.tools.files: ")
    assert "valid boolean" in str(caught.value)


PRESETS = """\
- kind: preset
  name: researcher
  spec:
    instructions: Research one question.
    limits: {max_rounds_per_turn: 6}
- id: lead
  spec:
    instructions: Lead.
"""


def test_apply_stores_presets_beside_agents(tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text(PRESETS)
    api = SpecApi()
    dry = run(api, "apply", "-f", str(path), "--dry-run")
    assert dry.stdout.splitlines() == ["created preset researcher", "created lead"]
    assert api.puts == []
    first = run(api, "apply", "-f", str(path))
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines() == [
        "created preset researcher",
        "created lead",
        "agent-token lead tok-lead",
    ]
    assert api.presets["researcher"]["spec"]["limits"]["max_rounds_per_turn"] == 6
    again = run(api, "apply", "-f", str(path))
    assert again.stdout.splitlines() == ["unchanged preset researcher", "unchanged lead"]
    path.write_text(PRESETS.replace("Research one question.", "Research two."))
    updated = run(api, "apply", "-f", str(path))
    assert updated.stdout.splitlines()[0] == "updated preset researcher (instructions)"
    assert api.presets["researcher"]["version"] == 2


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("- kind: preset\n  name: r\n", 1, "spec"),
        (
            "- kind: preset\n  name: r\n  spec: {}\n- kind: preset\n  name: r\n  spec: {}\n",
            5,
            "preset 'r' appears twice",
        ),
        ("- kind: presets\n  id: r\n", 1, "kind"),
        ("- kind: preset\n  name: r\n  spec: {}\n  loop: builtin\n", 4, "loop"),
    ],
)
def test_a_bad_preset_is_refused_with_its_line(text: str, line: int, words: str) -> None:
    with pytest.raises(AgentsFileError) as caught:
        parse_agents_file("a.yaml", text)
    assert str(caught.value).startswith(f"a.yaml:{line}: ")
    assert words in str(caught.value)


def test_a_preset_and_an_agent_may_share_a_name() -> None:
    text = "- kind: preset\n  name: r\n  spec: {}\n- id: r\n"
    assert [e.kind for _, e in parse_agents_file("a.yaml", text)] == ["preset", "agent"]
