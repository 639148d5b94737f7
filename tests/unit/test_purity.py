"""The pure core reads no clock and no randomness: time and ids are arguments (architecture rule 7).

An AST scan of every module under shared/domain and shared/wire, and of the services' rules and
policies (the modules pyproject's import contract declares pure). It resolves import aliases, and
flags references as well as calls, so `Field(default_factory=datetime.now)` counts too.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE_PACKAGES = ("shared/domain", "shared/wire")
PURE_CONTRACT = "Service rules and policies are pure"
"""The import-linter contract that lists the services' pure modules."""

FORBIDDEN_NAMES = frozenset(
    {
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "datetime.datetime.today",
        "datetime.date.today",
        "time.time",
        "time.time_ns",
        "time.monotonic",
        "time.monotonic_ns",
        "time.perf_counter",
        "time.perf_counter_ns",
        "time.localtime",
        "time.gmtime",
        "uuid.uuid1",
        "uuid.uuid4",
        "os.urandom",
        "ulid.ULID",
    }
)
FORBIDDEN_MODULES = frozenset({"random", "secrets"})
"""Anything reached through these modules is randomness."""


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted origin, from the module's imports."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                names[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


def _forbidden(dotted: str) -> bool:
    return dotted in FORBIDDEN_NAMES or dotted.partition(".")[0] in FORBIDDEN_MODULES


def impure_references(source: str) -> list[str]:
    """`line: name` for every clock or randomness read in `source`."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Load):
            dotted = _dotted(node, aliases)
            if dotted is not None and _forbidden(dotted):
                found.append(f"{node.lineno}: {dotted}")
    # `a.b.c` is also visited as `a.b` and `a`; keep the longest name per line.
    return sorted(item for item in set(found) if not any(o.startswith(item + ".") for o in found))


def _contract_modules() -> list[Path]:
    """The source files of the modules (or packages) the pure-services contract names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"] == PURE_CONTRACT]
    found: list[Path] = []
    for module in contract["source_modules"]:
        base = ROOT / module.replace(".", "/")
        found += sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    assert all(path.is_file() for path in found), found
    return found


def _pure_modules() -> list[Path]:
    modules = sorted(p for package in PURE_PACKAGES for p in (ROOT / package).rglob("*.py"))
    assert modules, f"no modules found under {PURE_PACKAGES} from {ROOT}"
    return modules + _contract_modules()


@pytest.mark.parametrize(
    "module", _pure_modules(), ids=lambda p: str(p.relative_to(ROOT)).replace("/", ".")
)
def test_pure_module_reads_no_clock_and_no_randomness(module: Path) -> None:
    assert impure_references(module.read_text(encoding="utf-8")) == []


# ---------------------------------------------------------------- the scanner itself

IMPURE_SNIPPETS = {
    "import datetime\ndatetime.datetime.now()": "datetime.datetime.now",
    "from datetime import datetime\ndatetime.now(UTC)": "datetime.datetime.now",
    "from datetime import datetime as dt\ndt.utcnow()": "datetime.datetime.utcnow",
    "from datetime import date\ndate.today()": "datetime.date.today",
    "import time\ntime.time()": "time.time",
    "import time as t\nt.monotonic()": "time.monotonic",
    "from time import perf_counter\nperf_counter()": "time.perf_counter",
    "import random\nrandom.random()": "random.random",
    "from random import choice\nchoice([1])": "random.choice",
    "import uuid\nuuid.uuid4()": "uuid.uuid4",
    "from uuid import uuid4\nuuid4()": "uuid.uuid4",
    "import secrets\nsecrets.token_hex(8)": "secrets.token_hex",
    "from ulid import ULID\nULID()": "ulid.ULID",
    "from datetime import datetime\nField(default_factory=datetime.now)": "datetime.datetime.now",
}

PURE_SNIPPETS = (
    "from datetime import UTC, datetime\ndatetime(2025, 1, 1, tzinfo=UTC)",
    "from datetime import UTC\nvalue.astimezone(UTC)",
    "from datetime import timedelta\nnow + timedelta(hours=1)",
    "def f(now):\n    return now.time()",
    "self.time = 3\nself.random = 4",
    "import hashlib\nhashlib.sha256(b'x').hexdigest()",
)


@pytest.mark.parametrize(("source", "name"), IMPURE_SNIPPETS.items())
def test_scanner_flags_clock_and_randomness(source: str, name: str) -> None:
    found = impure_references(source)
    assert len(found) == 1
    assert found[0].endswith(f": {name}")


@pytest.mark.parametrize("source", PURE_SNIPPETS)
def test_scanner_lets_time_passed_as_an_argument_through(source: str) -> None:
    assert impure_references(source) == []
