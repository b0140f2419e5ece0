"""The front door: the public API, the rerank command, and configs that stack the same way in every command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import rerank
from rerank.cli import COMMANDS
from rerank.cli.arguments import RerankCLI
from rerank.data.collection_config import as_collection_config

REPO = Path(__file__).resolve().parents[1]


def test_the_public_api_is_exported() -> None:
    from rerank import Reranker  # noqa: F401 - the issue's own example

    assert {"Reranker", "RerankModule", "RerankDataModule", "LOSSES", "build_loss", "RankingLoss", "evaluate",
            "CollectionConfig", "FirstStageConfig", "FoldsConfig", "TokenizationConfig"} <= set(rerank.__all__)
    assert all(hasattr(rerank, name) for name in rerank.__all__)
    assert isinstance(rerank.build_loss("listnet"), rerank.RankingLoss)


def test_the_rerank_command_lists_its_subcommands_and_runs_them(capsys: pytest.CaptureFixture) -> None:
    script = Path(sys.executable).with_name("rerank")  # installed by pyproject.toml's [project.scripts]
    command = [str(script)] if script.exists() else [sys.executable, "-m", "rerank"]
    listing = subprocess.run([*command, "--help"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert listing.returncode == 0
    assert all(f"  {name}" in listing.stdout for name in COMMANDS)
    from rerank.cli import main

    with pytest.raises(SystemExit) as unknown:
        main(["train"])
    assert unknown.value.code == 2 and "unknown command 'train'" in capsys.readouterr().err


def parsed_collection(*arguments: str) -> dict:
    cli = RerankCLI(list(arguments), prog="test", description="test", instantiate=False)
    return cli.option("data.collection")


def test_a_later_collection_replaces_an_earlier_one_as_a_whole(tmp_path: Path) -> None:
    mine = {"docs": "my/docs.jsonl", "queries": "my/queries.tsv", "qrels": "my/qrels.txt"}
    (tmp_path / "mine.yaml").write_text(json.dumps({"data": {"collection": mine}}))
    stacked = parsed_collection("--config", "cranfield.yaml", "--config", str(tmp_path / "mine.yaml"))
    assert stacked == mine  # neither Cranfield's ir_datasets id nor its label_map
    config = as_collection_config(stacked, "data.collection")
    assert config.ir_datasets is None and config.label_map is None
    # a dotted option changes one field of the collection it follows
    relabelled = parsed_collection("--config", "cranfield.yaml", "--data.collection.label_map", "{1: 2}")
    assert relabelled == {"ir_datasets": "cranfield", "label_map": {1: 2}}


@pytest.mark.parametrize("command", ["bm25", "cv", "compare", "teacher", "predict"])
def test_every_command_reads_the_same_options(command: str, capsys: pytest.CaptureFixture) -> None:
    from importlib import import_module

    module = import_module(f"rerank.cli.{command}")
    arguments = ["--config", "cranfield", "--data.first_stage.backend", "bm25s", "--print_config"]
    with pytest.raises(SystemExit) as exited:
        module.main([*(["runs/x"] if command == "compare" else []), *arguments])
    assert exited.value.code in (0, None)
    printed = capsys.readouterr().out
    assert "backend: bm25s" in printed and "ir_datasets: cranfield" in printed


def test_a_former_module_name_is_gone_with_the_shims() -> None:
    """Before the first release no old names are kept (CHANGELOG.md): a module that moved is found where it is."""
    import importlib

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("rerank.lightning_module")
    assert importlib.import_module("rerank.training.lightning_module").RerankModule is rerank.RerankModule
