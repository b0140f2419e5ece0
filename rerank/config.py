"""YAML configs: bare names resolve inside ``configs/``, several files stack, dotted options override.

    load_config(["cranfield.yaml", "overrides/bm25s.yaml"], ["data.first_stage.depth=100"])

Later files and overrides win; mappings merge key by key, other values replace.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
T = TypeVar("T")


def resolve_config_path(name: str | Path) -> Path:
    """``name`` if it is a file, else ``configs/<name>`` (with ``.yaml`` added when missing)."""
    path = Path(name)
    if path.is_file():
        return path
    for candidate in (CONFIG_DIR / path, CONFIG_DIR / path.with_suffix(".yaml")):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"config {str(name)!r} not found (looked in the working directory and in {CONFIG_DIR})")


def merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``update``, recursively for mappings."""
    merged = copy.deepcopy(dict(base))
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_config(files: Iterable[str | Path], overrides: Iterable[str] = ()) -> dict[str, Any]:
    """Merge YAML files in order, then ``key.sub=value`` overrides (values parsed as YAML)."""
    config: dict[str, Any] = {}
    for name in files:
        path = resolve_config_path(name)
        with path.open(encoding="utf-8") as handle:
            try:
                loaded = yaml.safe_load(handle) or {}
            except yaml.YAMLError as error:
                raise ValueError(f"{path}: not valid YAML: {error}") from None
        if not isinstance(loaded, Mapping):
            raise ValueError(f"{path}: expected a mapping at the top level, got {type(loaded).__name__}")
        config = merge(config, loaded)
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key:
            raise ValueError(f"override {override!r}: expected key.path=value")
        update: dict[str, Any] = {}
        node = update
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
        config = merge(config, update)
    return config


def build(cls: type[T], values: Mapping[str, Any] | None, where: str) -> T:
    """``cls(**values)`` with the config path in every error (unknown keys, bad values)."""
    values = dict(values or {})
    known = set(getattr(cls, "__dataclass_fields__", {}))
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: {error}") from None
