"""Config files on the command line: bare names of the shipped configs, and YAML read with the file and line of a
mistake.

``--config NAME`` resolves ``NAME`` among the configs rerank ships (:data:`CONFIG_DIR`, in folders by role) when it is
not a file; ``cranfield.yaml`` and the other collections' names stand for a recipe with the collection. Every
config file of a command line is read here before the command's parser sees it (torch-free, in milliseconds), so
that a YAML syntax error or a byte that is not UTF-8 fails with one line naming the file and line, instead of the
parser's message about ``"<unicode string>", line 10`` after a full usage dump.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..data.lines import read_text

CONFIG_DIR = Path(str(resources.files("rerank") / "configs"))
"""The configs rerank ships (package data: ``rerank/configs/`` in a checkout, inside the installed package from a
wheel), where ``--config NAME`` looks when NAME is not a file."""
ROLES = ("collections", "recipes", "losses", "hardware")
"""The shipped configs' folders, by role: a collection (its ``data.collection`` and folds), a recipe (how to train),
a loss head to stack on a recipe, the hardware to run on. ``--config NAME`` looks in each, in this order."""
COMPOSED = {
    "cranfield.yaml": ("recipes/default.yaml", "collections/cranfield.yaml"),
    "scifact.yaml": ("recipes/default.yaml", "collections/scifact.yaml"),
    "robust04.yaml": ("recipes/smoothi-bert.yaml", "collections/robust04.yaml"),
}
"""The names that stand for a recipe on a collection, and the files they stack."""
CONFIG_OPTIONS = ("--config", "-c")


def resolve_config_paths(name: str | Path) -> list[Path]:
    """The files ``--config name`` stacks: ``name`` if it is a file, else the shipped config of that name (``.yaml``
    added when missing) in :data:`CONFIG_DIR` or one of its :data:`ROLES`, or the files a :data:`COMPOSED` name
    stands for."""
    path = Path(name)
    if path.is_file():
        return [path]
    for candidate in (path, path.with_suffix(".yaml")):
        if candidate.as_posix() in COMPOSED:
            return [CONFIG_DIR / part for part in COMPOSED[candidate.as_posix()]]
        for folder in (CONFIG_DIR, *(CONFIG_DIR / role for role in ROLES)):
            if (folder / candidate).is_file():
                return [folder / candidate]
    raise FileNotFoundError(f"config {str(name)!r} not found (looked in the working directory and in {CONFIG_DIR})")


def config_settings(name: str | Path) -> dict[str, Any]:
    """What ``--config name`` sets, as plain values: its files read and stacked as the commands stack them (a later
    file's mapping merged into an earlier one's, but ``data.collection`` replaced as a whole)."""
    merged: dict[str, Any] = {}
    for path in resolve_config_paths(name):
        _merge(merged, yaml.safe_load(read_text(path)) or {}, "")
    return merged


def _merge(into: dict[str, Any], given: dict[str, Any], prefix: str) -> None:
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict) and f"{prefix}{key}" != "data.collection":
            _merge(into[key], value, f"{prefix}{key}.")
        else:
            into[key] = value


def _config_arguments(argv: list[str]) -> Iterator[tuple[int, str, bool]]:
    """``(position, config name, inline)`` of each ``--config NAME`` (inline: ``--config=NAME``) of ``argv``."""
    for position, argument in enumerate(argv):
        if argument in CONFIG_OPTIONS and position + 1 < len(argv):
            yield position + 1, argv[position + 1], False
        elif argument.startswith("--config="):
            yield position, argument.split("=", 1)[1], True


def resolve_configs(argv: list[str]) -> list[str]:
    """Each ``--config NAME`` (also ``--config=NAME``) -> ``--config FILE`` for each file it stacks
    (:func:`resolve_config_paths`)."""
    resolved, start = [], 0
    for position, name, inline in _config_arguments(argv):
        paths = [str(path) for path in resolve_config_paths(name)]
        if inline:
            resolved += [*argv[start:position], *(f"--config={path}" for path in paths)]
        else:
            resolved += [*argv[start:position], paths[0], *(item for path in paths[1:] for item in ("--config", path))]
        start = position + 1
    return resolved + argv[start:]


def config_files(argv: list[str]) -> list[Path]:
    """The config files that ``argv`` names (after :func:`resolve_configs`), in order."""
    return [Path(name) for _, name, _ in _config_arguments(argv)]


@dataclass(frozen=True)
class Setting:
    """One key of a config file: its dotted path, its value and the line it is on."""

    key: str
    value: Any
    line: int


def read_config(path: Path) -> yaml.Node | None:
    """A config file's YAML node tree (None when empty), or a ValueError naming the file and line of the mistake."""
    text = read_text(path)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        yaml.safe_load(text)  # the values too (e.g. an undefined alias), with the same error
    except yaml.MarkedYAMLError as error:
        mark, context = error.problem_mark or error.context_mark, error.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = " ".join(part for part in (error.context, error.problem) if part)
        if context is not None and mark is not None and context.line != mark.line:
            problem += f" (the construct began on line {context.line + 1})"
        raise ValueError(f"{where}: not valid YAML: {problem}") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML: {error}") from None
    if node is not None and not isinstance(node, yaml.MappingNode):
        raise ValueError(f"{path}:{node.start_mark.line + 1}: a config file holds a mapping of options "
                         "(model:, data:, trainer:, ...)")
    return node


def settings(node: yaml.MappingNode, prefix: str = "") -> Iterator[tuple[Setting, yaml.Node]]:
    """Every key of a mapping node, with its dotted path and line, and its value's node (walked by the caller)."""
    constructor = yaml.SafeLoader("")
    for key_node, value_node in node.value:
        mapping = isinstance(value_node, yaml.MappingNode)
        value = None if mapping else constructor.construct_object(value_node, deep=True)
        yield Setting(f"{prefix}{key_node.value}", value, key_node.start_mark.line + 1), value_node
