"""The shipped configs, sorted by role (collections, recipes, losses, hardware), found by the names users write."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rerank.cli.configs import COMPOSED, CONFIG_DIR, ROLES, config_settings, resolve_config_paths, resolve_configs

SECTIONS = {
    "collections": {"data.collection", "data.folds"},
    "hardware": {"trainer"},
    "losses": {"model", "data.train", "trainer"},
}
"""What a config of each role may set (dotted: a key under ``data:``); a recipe sets anything but the collection."""


def _keys(path: Path) -> set[str]:
    settings = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {f"data.{key}" for key in settings.get("data") or {}} | {key for key in settings if key != "data"}


SHIPPED = sorted(CONFIG_DIR.rglob("*.yaml"))


def _name(path: Path) -> str:
    return path.relative_to(CONFIG_DIR).as_posix()


@pytest.mark.parametrize("path", SHIPPED, ids=_name)
def test_each_shipped_config_sits_in_its_roles_folder_and_sets_only_what_the_role_sets(path: Path) -> None:
    role = path.relative_to(CONFIG_DIR).parts[0]
    assert role in ROLES
    if role == "recipes":  # how to train; a transfer recipe names the collection it trains on in data.train
        assert "data.collection" not in _keys(path), path
    else:
        assert _keys(path) <= SECTIONS[role], (path, _keys(path) - SECTIONS[role])


def test_a_recipe_carries_no_collection_and_a_collection_no_recipe() -> None:
    for name in ("default.yaml", "smoothi-bert.yaml", "demo.yaml"):
        assert "collection" not in (config_settings(name).get("data") or {}), name
    for name in ("collections/cranfield.yaml", "collections/robust04.yaml", "collections/scifact.yaml"):
        assert set(config_settings(name)) == {"data"}, name


SHIPPED = sorted(CONFIG_DIR.rglob("*.yaml"))


def _name(path: Path) -> str:
    return path.relative_to(CONFIG_DIR).as_posix()


@pytest.mark.parametrize("path", SHIPPED, ids=_name)
def test_every_shipped_file_is_found_by_its_name_within_its_role_unless_a_composed_name_stands_for_more(
        path: Path) -> None:
    short = path.relative_to(CONFIG_DIR / path.relative_to(CONFIG_DIR).parts[0]).as_posix()
    if short in COMPOSED:
        assert path in resolve_config_paths(short)  # cranfield.yaml: the default recipe with this collection
    else:
        assert resolve_config_paths(short) == [path]
        assert resolve_config_paths(short.removesuffix(".yaml")) == [path]
    assert resolve_config_paths(path.relative_to(CONFIG_DIR).as_posix()) == [path]


def test_a_collections_name_stacks_its_recipe_and_its_collection_in_place_on_the_command_line() -> None:
    default = str(CONFIG_DIR / "recipes" / "default.yaml")
    cranfield = str(CONFIG_DIR / "collections" / "cranfield.yaml")
    hinge = str(CONFIG_DIR / "losses" / "hinge.yaml")
    assert resolve_configs(["--config", "cranfield.yaml", "--config", "hinge", "--data.folds.test", "2"]) == [
        "--config", default, "--config", cranfield, "--config", hinge, "--data.folds.test", "2"]
    assert resolve_configs(["--config=cranfield"]) == [f"--config={default}", f"--config={cranfield}"]
    settings = config_settings("cranfield.yaml")
    assert settings["data"]["collection"] == {"ir_datasets": "cranfield", "label_map": {-1: 0, 1: 4, 2: 3, 3: 2, 4: 1}}
    assert settings["pretrain"]["max_steps"] == "auto" and settings["data"]["folds"]["count"] == 5


def test_an_unknown_name_says_where_it_looked() -> None:
    with pytest.raises(FileNotFoundError, match=r"config 'nosuch.yaml' not found \(looked in the working directory"):
        resolve_config_paths("nosuch.yaml")
