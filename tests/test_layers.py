"""The house keeps its floors: no module of ``rerank/`` imports from a floor above its own, no two modules import
each other (directly or round a longer cycle), and no command of ``rerank/cli`` imports another.

Every ``import`` and ``from ... import`` of every module is read with :mod:`ast`, wherever it stands (at the top, in a
function, under ``TYPE_CHECKING``): a deferred import up the floors is still a dependency that runs up them. The floors
are those of docs/development.md."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import REPO

PACKAGE = REPO / "rerank"
FLOORS: dict[str, int] = {
    # the root: the version (read by the packaging and the command line's --version)
    "rerank.version": 0,
    # 0: crash-safe writes, caches, checks, errors, logs, signals, the run layout; formats and readers; losses;
    # measures and score fusion
    "rerank.core": 0, "rerank.data": 0, "rerank.losses": 0, "rerank.evaluation": 0,
    # 1: the options' torch-free dataclasses; the model with its tokenizer; the first stage, the teacher, clicks
    "rerank.config": 1, "rerank.model": 1, "rerank.first_stage": 1, "rerank.teacher": 1, "rerank.clicks": 1,
    # 2: the deployed ranker (its rule, its choice on validation, its teacher's memo); a trained model at work (the
    # Python API, the exported folder, the HTTP server, PyTerrier)
    "rerank.ranker": 2, "rerank.inference": 2,
    # 3: training: the data module, the sources, the LightningModule, the stage, and the fit's callbacks
    "rerank.training": 3, "rerank.callbacks": 3,
    # 4: the command line and its entry points
    "rerank.cli": 4, "rerank.fit": 4, "rerank.__main__": 4,
}
FACADE = "rerank"
"""``rerank/__init__.py``: the public names, each imported on first use from wherever it lives."""
CLI_SHARED = {"rerank.cli", "rerank.cli.arguments", "rerank.cli.configs", "rerank.cli.failures", "rerank.cli.schema",
              "rerank.cli.summary", "rerank.cli.values", "rerank.cli.reference"}
"""What the commands share; every other module of ``rerank/cli`` is a command."""


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports(name: str) -> set[str]:
    """The rerank modules that module ``name`` imports (a package's ``from . import x`` of a submodule: ``x``)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "rerank"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] != "rerank":
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in MODULES else target)
    return {target for target in found if target != name}


def floor(name: str) -> int:
    prefixes = [prefix for prefix in FLOORS if name == prefix or name.startswith(prefix + ".")]
    if not prefixes:
        raise AssertionError(f"{name} is on no floor: add it to FLOORS here and to docs/development.md")
    return FLOORS[max(prefixes, key=len)]


GRAPH = {name: imports(name) for name in MODULES}


def test_every_module_is_on_a_floor() -> None:
    for name in MODULES:
        if name != FACADE:
            floor(name)


@pytest.mark.parametrize("name", sorted(set(MODULES) - {FACADE}))
def test_no_import_runs_up_the_floors(name: str) -> None:
    upward = sorted(target for target in GRAPH[name] if target != FACADE and floor(target) > floor(name))
    assert not upward, f"{name} (floor {floor(name)}) imports from above: " + ", ".join(
        f"{target} (floor {floor(target)})" for target in upward)
    assert FACADE not in GRAPH[name], f"{name} imports the facade rerank/__init__.py; import the module itself"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_modules_import_each_other() -> None:
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_commands_are_leaves() -> None:
    commands = {name for name in MODULES if name.startswith("rerank.cli.") and name not in CLI_SHARED}
    assert {"rerank.cli.fit", "rerank.cli.predict", "rerank.cli.cv"} <= commands
    for command in sorted(commands):
        others = sorted(GRAPH[command] & commands)
        assert not others, f"the command {command} imports the command(s) {others}: move what they share below them"


LONGEST = 60
"""The most lines a function of rerank/ or scripts/ may have, its docstring included: one a reader can hold."""


def test_no_function_is_longer_than_a_reader_can_hold() -> None:
    long = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(REPO / "scripts").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= LONGEST:
                long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} "
                            f"({node.end_lineno - node.lineno + 1} lines)")
    assert not long, "split these: " + "; ".join(long)


def test_scripts_use_the_public_api_only() -> None:
    """Every script imports rerank's names from ``rerank`` itself, each of them in ``rerank.__all__``: no module of
    the package beneath it (``rerank.cli`` included), so that the package can move its modules and the scripts keep
    working. A script that needs more widens the public API on purpose (``rerank/__init__.py``)."""
    import rerank

    outside = []
    for path in sorted((REPO / "scripts").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                outside += [f"{where} import {alias.name}" for alias in node.names
                            if alias.name.split(".")[0] == "rerank"]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rerank":
                if node.module != "rerank":
                    outside.append(f"{where} from {node.module}")
                else:
                    outside += [f"{where} {alias.name}" for alias in node.names if alias.name not in rerank.__all__]
    assert not outside, "scripts reach past rerank's public API: " + "; ".join(outside)


def test_the_floors_of_the_development_guide_are_these() -> None:
    """docs/development.md names each floor's modules as FLOORS does: every top module or package of rerank/ is named
    under the heading of its floor, so that the guide cannot drift from the code."""
    guide = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    headings = [guide.index(f"**Floor {number}:") for number in range(5)] + [len(guide)]
    for prefix, number in FLOORS.items():
        name = prefix.removeprefix("rerank.").split(".")[-1]
        section = guide[headings[number]: headings[number + 1]]
        assert f"`{name}" in section or f"rerank/{name}" in section, f"{prefix}: not under floor {number}'s heading"
