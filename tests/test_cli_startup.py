"""The command line answers before the heavy libraries load: ``import rerank``, ``rerank --help``,
``rerank <command> --help`` and mistyped options or config files (checks on ``sys.modules``, not timings; the
times are in docs/experiments/benchmarks.md, ``scripts/benchmarks/bench_startup.py``); and the cached options they
answer from are the parsers' own, keyed so that they cannot drift, and made again when damaged."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

import rerank
from rerank.cli import COMMANDS, schema
from rerank.cli.arguments import RerankCLI
from rerank.cli.commands import HELP_ALL, READS
from rerank.cli.configs import resolve_configs

HEAVY = ("torch", "lightning", "transformers")
PROBE = f"""
import json, sys
from rerank.cli import main
code = 0
try:
    main(json.loads(sys.argv[1]))
except SystemExit as exit:
    code = exit.code
print(json.dumps({{"code": code, "loaded": [name for name in {HEAVY!r} if name in sys.modules]}}))
"""


@pytest.fixture(scope="module", autouse=True)
def cli_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty cache for this module: the first command asked makes its entry, the rest read it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RERANK_CACHE", str(tmp_path_factory.mktemp("cache")))
        schema.entry.cache_clear()
        yield Path(os.environ["RERANK_CACHE"])
        schema.entry.cache_clear()


def live_help(command: str) -> str:
    """The help the command's own parser prints (80 columns), not through the dispatcher or the cache."""
    done = subprocess.run([sys.executable, "-c", f"from rerank.cli.{command} import main; main(['--help'])"],
                          capture_output=True, text=True, cwd=REPO, timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def probe(*arguments: str) -> tuple[dict, str, str]:
    """``rerank ARGUMENTS`` in a fresh interpreter: its exit code and which heavy libraries it loaded; stdout (but
    the probe's line) and stderr."""
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(arguments)], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    *printed, last = done.stdout.splitlines()
    return json.loads(last), "\n".join(printed), done.stderr


def without_first_use(error: str) -> str:
    """``error`` without the line a command's first use prints while its options are read."""
    return "\n".join(line for line in error.splitlines() if not line.startswith("rerank: reading the options"))


def test_importing_rerank_loads_neither_torch_nor_lightning() -> None:
    code = ("import json, sys, rerank, rerank.cli, rerank.cli.schema, rerank.cli.configs, rerank.data.lines\n"
            f"before = [name for name in {HEAVY!r} if name in sys.modules]\n"
            "from rerank import Reranker\n"
            "print(json.dumps([before, Reranker.__module__, 'torch' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    before, module, torch_after = json.loads(done.stdout.splitlines()[-1])
    assert before == []
    assert module == "rerank.inference.reranker" and torch_after  # the public API works, loading torch on first use


def test_every_public_name_is_exported_lazily() -> None:
    assert set(rerank.__all__) == {*rerank._WHERE, *rerank._MODULES, "__version__"}
    for name, place in rerank._WHERE.items():
        module, _, attribute = place.partition(":")
        assert getattr(rerank, name) is getattr(importlib.import_module(f"rerank{module}"), attribute or name)
    for name, module in rerank._MODULES.items():
        assert getattr(rerank, name) is importlib.import_module(f"rerank{module}")
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        rerank.Nope  # noqa: B018


@pytest.mark.parametrize("command", list(COMMANDS))
def test_command_help_is_the_parsers_own_without_torch(command: str) -> None:
    status, printed, _ = probe(command, HELP_ALL)  # the first asks the parser, in a process of its own
    assert status == {"code": 0, "loaded": []}
    assert printed + "\n" == live_help(command)  # every option the parser accepts
    status, printed, error = probe(command, "--help")  # the second reads the cache
    assert status == {"code": 0, "loaded": []} and "reading the options" not in error
    assert printed + "\n" == schema.help_text(command)  # the options the command reads


@pytest.mark.parametrize("command", list(READS))
def test_a_commands_help_shows_the_options_it_reads_and_the_rest_behind_help_all(command: str) -> None:
    shown, every = schema.help_text(command), schema.help_text(command, every=True)
    assert len(shown.splitlines()) < 220 < len(every.splitlines())
    assert "``" not in shown and ":mod:" not in shown and ":class:" not in shown  # plain text, not reST
    accepted = set(schema.entry(command)["options"])
    assert all(read in accepted or f"  {read} " in shown for read in READS[command])  # the table names real ones
    names = {name.removesuffix(".help") for name in re.findall(r"^  (?:-\w \S+, )?--([\w.]+)", shown, re.M)}
    assert {read for read in READS[command] if read in accepted} <= names  # each one shown...
    for name in names - set(schema.ALWAYS):  # ...and only those (and their sub-options)
        assert any(name == read or name.startswith(f"{read}.") for read in READS[command]), name
    assert "--trainer.gradient_clip_val" not in shown and "--trainer.gradient_clip_val" in every
    ending = f"rerank {command} {HELP_ALL} lists them all, Lightning's Trainer and checkpoint options"
    assert ending in " ".join(shown.split())


def test_the_command_list_and_option_mistakes_answer_without_torch(tmp_path: Path) -> None:
    status, printed, _ = probe("--help")
    assert status == {"code": 0, "loaded": []} and "commands:" in printed
    status, _, error = probe("fit", "--config", "cranfield.yaml", "--data.rerank_depht", "30")
    assert status == {"code": 2, "loaded": []}
    assert without_first_use(error).splitlines()[0] == (
        "error: --data.rerank_depht: unknown option 'data.rerank_depht'; did you mean data.rerank_depth, "
        "data.repeats? (rerank fit --help lists the options)")
    status, _, error = probe("cv", "--data.rerank_depth", "thirty")
    assert status == {"code": 2, "loaded": []}
    assert without_first_use(error).splitlines()[0] == "error: --data.rerank_depth: expected an integer; got 'thirty'"
    config = tmp_path / "mine.yaml"
    config.write_text("model:\n  loss: listnet\ndata:\n  rerank_dept: 30\n")
    status, _, error = probe("predict", "--config", str(config))
    assert status == {"code": 2, "loaded": []}
    assert without_first_use(error).splitlines()[0].startswith(
        f"error: {config}:4: unknown option 'data.rerank_dept'; did you mean data.rerank_depth")


def test_the_cached_options_cannot_drift_and_a_damaged_entry_is_made_again(cli_cache: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert not (REPO / "rerank" / "cli" / "schema.json").exists() and not (REPO / "rerank" / "cli" / "help").exists()
    path = schema.entry_path("fit")
    assert path.is_relative_to(cli_cache / "cli")
    # another Lightning, jsonargparse or Python, or another line of rerank's sources: another entry
    with monkeypatch.context() as patch:
        other = {**schema.installed_versions(), "lightning": "0.0"}
        patch.setattr(schema, "installed_versions", lambda: other)
        assert schema.entry_path("fit") != path
    copy = tmp_path / "rerank"
    shutil.copytree(schema.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(schema, "PACKAGE", copy)
    schema.source_digest.cache_clear()
    assert schema.entry_path("fit") == path  # the same sources, the same entry
    module = copy / "training" / "datamodule.py"
    module.write_text(module.read_text() + "\n# a comment\n")
    schema.source_digest.cache_clear()
    assert schema.entry_path("fit") != path
    monkeypatch.undo()
    schema.source_digest.cache_clear()
    # a damaged entry (cut short) is removed, said, and made again from the parser
    probe("fit", HELP_ALL)
    path.write_bytes(path.read_bytes()[:100])
    status, printed, error = probe("fit", HELP_ALL)
    assert status == {"code": 0, "loaded": []} and "removed, and made again" in error and "reading the options" in error
    assert printed + "\n" == live_help("fit")
    assert json.loads(path.read_text())["help"] == printed + "\n"


def parser_accepts(*options: str) -> bool:
    """Whether ``rerank fit``'s parser accepts ``options`` (on top of cranfield.yaml), without building anything."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            RerankCLI(["--config", "cranfield.yaml", *options], prog="rerank fit", description="", instantiate=False)
        except SystemExit:
            return False
    return True


def stored_checks_accept(*options: str) -> bool:
    try:
        schema.check("fit", resolve_configs(["--config", "cranfield.yaml", *options]))
    except ValueError:
        return False
    return True


VALUES = [  # (option, value): accepted and refused values of ints, floats, booleans, choices and nullable options
    ("--data.rerank_depth", "30"), ("--data.rerank_depth", "3.0"), ("--data.rerank_depth", "abc"),
    ("--data.rerank_depth", "1e3"), ("--data.rerank_depth", "0x10"), ("--data.rerank_depth", "+7"),
    ("--model.optimizer.encoder_lr", "1"), ("--model.optimizer.encoder_lr", "1e-5"),
    ("--model.optimizer.encoder_lr", "abc"), ("--model.optimizer.encoder_lr", "inf"),
    ("--model.optimizer.warmup", ".5"), ("--model.optimizer.warmup", "nan"),
    ("--evaluation.selection.interpolate", "true"), ("--evaluation.selection.interpolate", "True"),
    ("--evaluation.selection.interpolate", "yes"), ("--evaluation.selection.interpolate", "1"),
    ("--evaluation.selection.interpolate", "maybe"), ("--model.dropout", "null"),
    ("--model.dropout", "None"), ("--trainer.max_epochs", "none"), ("--trainer.max_epochs", "null"),
    ("--trainer.precision", "bf16-mixed"), ("--trainer.precision", "bf16mixed"), ("--trainer.precision", "32"),
    ("--model.tokenization.max_query_length", "auto"), ("--model.tokenization.max_query_length", "24"),
    ("--model.tokenization.max_length", "long"), ("--data.first_stage.k1", "0.9"), ("--data.first_stage.k1", "x"),
    ("--data.collection.query_field", "text"), ("--data.rerank_depht", "3"), ("--trainer.max_epoch", "3"),
    ("--trainer.max_epoch", "x"), ("--data.rerank", "3"),
]


@pytest.mark.parametrize(("option", "value"), VALUES, ids=[f"{o}={v}" for o, v in VALUES])
def test_the_stored_checks_refuse_only_what_the_parser_refuses(option: str, value: str) -> None:
    if not stored_checks_accept(option, value):
        assert not parser_accepts(option, value), f"{option} {value}: the parser accepts what the check refuses"


def test_the_stored_checks_catch_the_common_mistakes() -> None:
    for option, value in [("--data.rerank_depth", "abc"), ("--model.optimizer.encoder_lr", "abc"),
                          ("--evaluation.selection.interpolate", "maybe"), ("--trainer.precision", "bf16mixed"),
                          ("--data.rerank_depht", "3"), ("--model.tokenization.max_lenght", "3")]:
        assert not stored_checks_accept(option, value), (option, value)
        assert not parser_accepts(option, value), (option, value)


SLIPS = [  # (command, options, what the one error line says): values the parser or the command would refuse late
    ("fit", ["--model.loss", "smoothi"], "--model.loss: unknown loss 'smoothi'; did you mean smoothi_ap?"),
    ("fit", ["--model.teacher_loss", "listnet"], "--model.teacher_loss: model.teacher_loss 'listnet' takes graded "
                                                 "labels; use a distillation head"),
    ("fit", ["--model.loss_args", "{alpah: 1}"], "--model.loss_args: loss 'listnet' has no parameter alpah"),
    ("fit", ["--data.strategy", "best"], "--data.strategy: expected one of top, random, pairs; got 'best'"),
    ("fit", ["--evaluation.selection.epoch", "last"],
     "--evaluation.selection.epoch: evaluation.selection.epoch must be one of one_se, best; got 'last'"),
    ("fit", ["--data.folds.test", "6"], "--data.folds.test: folds.test must be in [1, 5]; got 6"),
    ("cv", ["--data.folds.count", "2"], "--data.folds.count: folds.count must be >= 3; got 2"),
    ("fit", ["--evaluation.metrics", "[nDCG@10, nDGC@20]"], "--evaluation.metrics: unknown measure 'nDGC@20'"),
    ("fit", ["--evaluation.selection.measure", "P@10"],
     "--evaluation.selection.measure: evaluation.selection.measure 'P@10' must be one of evaluation.metrics"),
    ("fit", ["--model.optimizer.encoder_lr", "0"], "--model.optimizer.encoder_lr: model.optimizer.encoder_lr must "
                                                   "be > 0"),
    ("fit", ["--pretrain.passes", "0"], "--pretrain.passes: pretrain.passes must be > 0"),
    ("fit", ["--data.train", "[{queries: train, targets: teacher}]"], "--data.train: data.train[0]: targets teacher "
                                                                      "needs a teacher"),
    ("fit", ["--trainer.accelerator", "gpux"], "--trainer.accelerator: trainer.accelerator must be one of auto, cpu"),
    ("fit", ["--trainer.devices", "two"], "--trainer.devices: trainer.devices must be a number of devices"),
    ("fit", ["--trainer.precision", "bf17"], "--trainer.precision: expected one of 64, 32, 16"),
    ("fit", ["--trainer.logger", "WandbLoger"], "--trainer.logger: trainer.logger 'WandbLoger' is not one of "
                                                "Lightning's loggers; did you mean WandbLogger?"),
    ("fit", ["--trainer.fast_dev_run", "true"], "--trainer.fast_dev_run: trainer.fast_dev_run runs a batch or two"),
    ("fit", ["--trainer.enable_checkpointing", "false"], "--trainer.enable_checkpointing: trainer.enable_checkpointing "
                                                         "false: a fit tests the weights its checkpoints hold"),
    ("fit", ["--optimizer", "AdamW"], "--optimizer: optimizer would replace the recipe's optimizer: set "
                                      "model.optimizer instead"),
    ("fit", ["--lr_scheduler", "StepLR"], "--lr_scheduler: lr_scheduler would replace the recipe's schedule: set "
                                          "model.optimizer.warmup instead"),
    ("predict", ["--data.collection.name", "robust04"], "--data.collection.name: data.collection: unknown option(s) "
                                                         "name"),
    ("fit", ["--data.collection.query_field", "titel"], "--data.collection.query_field: data.collection: "
                                                        "collection.query_field must be one of"),
    ("serve", ["--serve.port", "70000"], "--serve.port: port must be in [0, 65535]; got 70000"),
    ("serve", ["--serve.device", "gpu0"], "--serve.device: serve.device must be cpu, cuda, cuda:N or mps"),
    ("serve", ["--serve.precision", "int4"], "--serve.precision: precision must be one of 32, bf16"),
]


@pytest.mark.parametrize(("command", "options", "words"), SLIPS, ids=[" ".join(slip[2].split()[:1] + slip[1][1:])
                                                                      for slip in SLIPS])
def test_every_value_is_checked_before_the_collection_or_the_model_is_opened(tmp_path: Path, command: str,
                                                                             options: list[str], words: str) -> None:
    """A collection whose files do not exist and a model that cannot load: the value's mistake still comes first,
    in one line naming the option, before torch (and so the collection or the model) is loaded."""
    nowhere = tmp_path / "nowhere"
    collection = json.dumps({name: str(nowhere / f"{name}.txt") for name in ("docs", "queries", "qrels")})
    status, _, error = probe(command, "--config", "cranfield.yaml", "--data.collection", collection,
                             "--model.model_name", str(nowhere / "model"), *options)
    assert status == {"code": 2, "loaded": []}, error
    first = without_first_use(error).splitlines()[0]
    assert first.startswith(f"error: {words}"), first
    assert "nowhere" not in first


def test_a_number_given_to_a_text_option_is_read_as_its_text(tmp_path: Path) -> None:
    """``--serve.precision 32`` (a text option whose value YAML reads as a number) passes the early check: the
    next mistake, the missing model, is the one said."""
    for precision in ("32", "bf16"):
        status, _, error = probe("serve", "--model.model_name", str(tmp_path / "none"), "--serve.precision", precision)
        assert status["code"] == 2 and without_first_use(error).splitlines()[0].startswith(
            "error: --model.model_name: model.model_name"), error


def test_a_value_in_a_config_file_is_named_by_its_file_and_line_and_a_missing_file_after_the_values(
        tmp_path: Path) -> None:
    config = tmp_path / "mine.yaml"
    config.write_text("model:\n  loss: listnet\ndata:\n  folds:\n    count: 5\n    test: 7\n")
    status, _, error = probe("fit", "--config", "cranfield.yaml", "--config", str(config))
    assert status == {"code": 2, "loaded": []}
    assert without_first_use(error).splitlines()[0] == f"error: {config}:6: folds.test must be in [1, 5]; got 7"
    docs = tmp_path / "nowhere" / "docs.jsonl"
    collection = json.dumps({"docs": str(docs), "queries": str(config), "qrels": str(config)})
    status, _, error = probe("fit", "--config", "cranfield.yaml", "--data.collection", collection)
    assert status == {"code": 2, "loaded": []}
    assert without_first_use(error).splitlines()[0] == (
        f"error: --data.collection: data.collection.docs {docs}: no such file")
    status, _, error = probe("predict", "--run", str(tmp_path / "no.run"), "--data.collection", collection)
    assert without_first_use(error).splitlines()[0].startswith("error: --model.model_name: give the trained model")
