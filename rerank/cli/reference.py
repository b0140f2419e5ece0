"""The configuration reference, ``docs/configuration.md``, made from the options' own classes: each section's
options, their defaults and what they do, as their docstrings say it. ``python -m rerank.cli.reference >
docs/configuration.md`` makes it; ``tests/test_docs.py`` checks that the page is what this makes, so it cannot drift
from the code."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from typing import Any

INTRO = """# Configuration reference

Every option of a config file (or of the command line, spelled as in the YAML: `--data.folds.test 2`), by section,
with its default and what it does. Made from the options' classes by `python -m rerank.cli.reference`; the shipped
configs ([below](#shipped-configs): `cranfield.yaml`, `robust04.yaml`, ...) set the recipe's own values over these
defaults. `rerank <command>
--help-all` lists the Trainer's options (`trainer:`) and the checkpoints' (`checkpoint:`, `last_checkpoint:`), which
are Lightning's.
"""


def sections() -> list[tuple[str, Callable[..., Any], str]]:
    """``(section, class, what the section is)``, in the order of a config file."""
    from ..callbacks.evaluator import Evaluator
    from ..clicks.targets import ClickTargetConfig
    from ..config.first_stage import FirstStageConfig
    from ..config.optimizer import OptimizerSettings
    from ..config.pretrain import PretrainConfig
    from ..config.selection import SelectionRules
    from ..config.serve import ServeConfig
    from ..config.source import SourceConfig
    from ..config.teacher import TeacherConfig
    from ..config.tokenization import TokenizationConfig
    from ..data.collection_config import CollectionConfig
    from ..data.folds import FoldsConfig
    from ..data.pseudo_queries import PseudoQueryConfig
    from ..training.datamodule import RerankDataModule
    from ..training.lightning_module import RerankModule

    return [("model", RerankModule, "the cross-encoder and its loss heads"),
            ("model.tokenization", TokenizationConfig, "how pairs become rows (kept with the export)"),
            ("model.optimizer", OptimizerSettings, "AdamW"),
            ("data", RerankDataModule, "the collection, its candidates, the folds and the training lists"),
            ("data.collection", CollectionConfig, "where documents, queries and judgments come from"),
            ("data.first_stage", FirstStageConfig, "the candidates"),
            ("data.folds", FoldsConfig, "the query folds"),
            ("data.train[]", SourceConfig, "a source of training lists (also `pretrain.train[]`)"),
            ("data.train[].teacher", TeacherConfig, "a source's teacher"),
            ("data.train[].pseudo", PseudoQueryConfig, "a source's pseudo-queries"),
            ("data.train[].clicks", ClickTargetConfig, "a source's click log"),
            ("evaluation", Evaluator, "what validation and test measure"),
            ("evaluation.selection", SelectionRules, "the choices made on validation"),
            ("pretrain", PretrainConfig, "the judgment-free first stage"),
            ("serve", ServeConfig, "`rerank serve`")]


def markdown() -> str:
    """The reference page."""
    parts = [INTRO]
    for section, cls, what in sections():
        parts += [f"\n## `{section}`: {what}\n", "| option | default | what it does |", "|---|---|---|"]
        described = _described(cls)
        for name, default in _options(cls):
            parts.append(f"| `{name}` | {_default(default)} | {described.get(name, '')} |")
    return "\n".join(parts + _shipped()) + "\n"


def _shipped() -> list[str]:
    """The shipped configs, by role, each with the first sentence of its opening comment."""
    from .configs import COMPOSED, CONFIG_DIR, ROLES, resolve_config_paths

    lines = ["\n## Shipped configs\n",
             "`--config NAME` finds these by name (`--config default.yaml`, `--config clicks/naive.yaml`); "
             "stack them, later files winning.\n", "| name | stacks | what it is |", "|---|---|---|"]
    lines += [f"| `{name}` | {' + '.join(f'`{part}`' for part in parts)} | a recipe on a collection |"
              for name, parts in COMPOSED.items()]
    for role in ROLES:
        for path in sorted((CONFIG_DIR / role).rglob("*.yaml")):
            short = path.relative_to(CONFIG_DIR / role).as_posix()
            name = short if resolve_config_paths(short) == [path] else path.relative_to(CONFIG_DIR).as_posix()
            lines.append(f"| `{name}` | `{role}/` | {_opening(path)} |")
    return lines


def _opening(path: Any) -> str:
    """The first sentence of a config file's opening comment."""
    comment = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("# ").strip())
    text = " ".join(part for part in comment if part)
    return _plain(re.split(r"(?<=\.)\s(?=[A-Z`-])", text, maxsplit=1)[0].rstrip(":.")).replace("`", "")


def _options(cls: Callable[..., Any]) -> list[tuple[str, Any]]:
    """A class's options and their defaults (a dataclass's fields, or its constructor's parameters)."""
    if dataclasses.is_dataclass(cls):
        return [(field.name, _field_default(field)) for field in dataclasses.fields(cls)]
    return [(name, parameter.default) for name, parameter in inspect.signature(cls.__init__).parameters.items()
            if name not in ("self", "args", "kwargs")]


def _field_default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return inspect.Parameter.empty


def _described(cls: Callable[..., Any]) -> dict[str, str]:
    """Each option's description, from the ``Attributes:`` (or ``Args:``) section of the class's docstring."""
    text = inspect.getdoc(cls) or ""
    match = re.search(r"^(?:Attributes|Args):\n(.*?)(?:\n\S|\Z)", text, re.S | re.M)
    found: dict[str, str] = {}
    name = None
    for line in (match.group(1) if match else "").splitlines():
        entry = re.match(r"^    (\w+):\s*(.*)$", line)
        if entry:
            name, found[entry.group(1)] = entry.group(1), entry.group(2)
        elif name is not None and line.strip():
            found[name] += " " + line.strip()
    return {key: _plain(value) for key, value in found.items()}


def _plain(text: str) -> str:
    """reST as markdown: ``code`` as `code`, a role's target as its last name."""
    text = re.sub(r":\w+:`~?([^`<]*?)\s*<[^>]*>`", r"\1", text)
    text = re.sub(r":\w+:`~?([\w.]+)`", lambda found: f"`{found.group(1).rsplit('.', 1)[-1]}`", text)
    return text.replace("``", "`").replace("|", "\\|")


def _default(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return "required"
    if dataclasses.is_dataclass(value):
        return "see below"
    return f"`{value!r}`".replace("|", "\\|")


if __name__ == "__main__":
    print(markdown(), end="")
