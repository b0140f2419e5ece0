"""Every value of a command line checked before the command loads its libraries, in a fraction of a second.

:mod:`rerank.cli.schema` checks each option's name and scalar type; this module checks what the values mean, on the
settings a command line gives once its config files and options are merged (:func:`given_settings`, later ones
winning, as the parser merges them):

- the loss heads (``model.loss``, ``model.teacher_loss``, ``model.click_loss``) and their ``*_args``, against the
  registry the stored schema lists (:func:`registry`);
- every section whose options are a torch-free dataclass of :mod:`rerank.config` or :mod:`rerank.data`, built as the
  parser will build it, so that its own checks run (folds, first stage, tokenization, optimizer rates, selection
  rules, the stage, the sources, the server's port and limits);
- the measures (``evaluation.metrics`` and ``evaluation.selection.measure``), devices and the logger class (a
  missing package named with its ``pip install``);
- last, the files the options name (a local model folder, the collection's files, runs), so that a mistaken value
  is reported before a missing file.

Each error is one line that names the option as the user wrote it: ``--data.folds.test`` on the command line, or
``mine.yaml:12`` in a config file.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..config.first_stage import FirstStageConfig
from ..config.optimizer import OptimizerSettings
from ..config.pretrain import PretrainConfig
from ..config.selection import SelectionRules
from ..config.serve import ServeConfig
from ..config.source import as_source_configs
from ..config.tokenization import TokenizationConfig
from ..data.collection_config import as_collection_config
from ..data.folds import FoldsConfig
from .configs import CONFIG_OPTIONS, read_config, settings


@dataclass(frozen=True)
class Given:
    """One setting of a command line: its value (as YAML reads it) and where it was written."""

    value: Any
    where: str


Settings = dict[str, Given]
"""``{dotted option: Given}``: a group's options one by one, any other option (a free-form mapping, a list) whole."""

SECTIONS: dict[str, Callable[..., Any]] = {
    "data.folds": FoldsConfig,
    "data.first_stage": FirstStageConfig,
    "model.tokenization": TokenizationConfig,
    "model.optimizer": OptimizerSettings,
    "evaluation.selection": SelectionRules,
    "pretrain": PretrainConfig,
    "serve": ServeConfig,
}
"""The option groups built from their torch-free dataclass, whose own checks then run."""
HEADS = {"model.loss": "qrels", "model.teacher_loss": "teacher", "model.click_loss": "clicks"}
"""The loss heads and what each learns from (a teacher's and the clicks' heads take ungraded targets)."""
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu", "hpu", "xla")
DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
LOGGERS = {"CSVLogger": None, "TensorBoardLogger": "tensorboard", "MLFlowLogger": "mlflow", "WandbLogger": "wandb",
           "CometLogger": "comet_ml", "NeptuneLogger": "neptune"}
"""Lightning's loggers and the package each needs (None: none beyond Lightning)."""
LOGGER_PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb", "comet_ml": "comet-ml",
                   "neptune": "neptune"}
"""The ``pip install`` name of each logger's package."""


def given_settings(argv: list[str], options: Mapping[str, Any]) -> Settings:
    """The settings of ``argv`` (config files resolved) in the order the parser applies them: each ``--config``
    file's where it stands, each ``--option value`` after what came before it. ``options``: the stored schema's
    (each with a ``kind``: ``group`` options are set one by one; and a ``type``: a number written as text, such as
    ``1e-5``, is read as the parser reads it)."""
    found: Settings = {}
    position = 0
    while position < len(argv):
        argument = argv[position]
        if argument in CONFIG_OPTIONS or argument.startswith("--config="):
            path = argument.split("=", 1)[1] if "=" in argument else argv[position + 1]
            node = read_config(Path(path))
            if node is not None:
                _merge_node(found, node, "", path, options)
            position += 1 if "=" in argument else 2
            continue
        if argument.startswith("--") and argument not in CONFIG_OPTIONS:
            key, equals, text = argument[2:].partition("=")
            if not equals:
                following = argv[position + 1] if position + 1 < len(argv) else None
                text = "" if following is None or following.startswith("--") else following
                position += 0 if not text else 1
            key = key.rstrip("+")
            _merge_value(found, key, yaml.safe_load(text) if text.strip() else text or None, f"--{key}", options)
        position += 1
    return found


def _merge_node(found: Settings, node: yaml.MappingNode, prefix: str, path: str, options: Mapping[str, Any]) -> None:
    loader = yaml.SafeLoader("")
    for setting, value_node in settings(node, prefix):
        if _kind(options, setting.key) == "group" and isinstance(value_node, yaml.MappingNode):
            _merge_node(found, value_node, f"{setting.key}.", path, options)
        else:
            value = _typed(options, setting.key, loader.construct_object(value_node, deep=True))
            _set(found, setting.key, Given(value, f"{path}:{setting.line}"))


def _merge_value(found: Settings, key: str, value: Any, where: str, options: Mapping[str, Any]) -> None:
    if _kind(options, key) == "group" and isinstance(value, dict):
        for name, item in value.items():
            _merge_value(found, f"{key}.{name}", item, where, options)
    else:
        _set(found, key, Given(_typed(options, key, value), where))


def _kind(options: Mapping[str, Any], key: str) -> str | None:
    option = options.get(key)
    return option.kind if option is not None else None


def _typed(options: Mapping[str, Any], key: str, value: Any) -> Any:
    """``value`` as the parser reads an option of that type: a float written as text (``1e-5``, which YAML 1.1 reads
    as a string) or as an integer as the float; a number given to a text option as its text (``precision: 32``)."""
    option = options.get(key)
    if option is not None and option.type == "str" and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if option is None or option.type not in ("float", "int") or isinstance(value, bool):
        return value
    if option.type == "float" and isinstance(value, int | str):
        try:
            return float(value)
        except ValueError:
            return value
    if option.type == "int" and isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return value
    return value


def _set(found: Settings, key: str, given: Given) -> None:
    """``key`` set, replacing what was set below it (a mapping given whole replaces its earlier keys)."""
    for stale in [name for name in found if name.startswith(f"{key}.")]:
        del found[stale]
    found[key] = given


def check_values(command: str, given: Settings, registry: Mapping[str, Any], files: bool = True) -> None:
    """Fail on the first value of ``given`` that the command would refuse, the options' meanings before the files
    they name (with ``files``).

    Raises:
        ValueError: one line, naming the option where it was written.
    """
    if command in ("predict", "serve") and "model.model_name" not in given:
        raise ValueError("--model.model_name: give the trained model to re-rank with: the folder rerank fit exports "
                         "(OUTPUT/model), or a cross-encoder with a trained head")
    if command in ("fit", "cv"):
        _check_recipe(given)
    _check_heads(given, registry.get("losses", {}))
    for section, build in SECTIONS.items():
        _check_section(given, section, build)
    _check_collection(given)
    _check_sources(given)
    _check_measures(given)
    _check_devices(given)
    _check_logger(given)
    if files:
        check_paths(command, given)


REFUSED = {
    "trainer.fast_dev_run": "runs a batch or two of each loop and writes no checkpoint, so the fit would have no "
                            "weights to test",
    "trainer.overfit_batches": "trains and validates on the same few training batches instead of the folds",
}
"""Trainer options that would replace what a fit trains, validates and tests on, and why each is refused."""


def _check_recipe(given: Settings) -> None:
    """Refuse the Trainer options that would replace the recipe (:data:`REFUSED`), and a fit without checkpoints
    (the tested weights are a checkpoint's)."""
    for option, why in REFUSED.items():
        item = given.get(option)
        if item is not None and item.value not in (None, False, 0, 0.0):
            raise ValueError(f"{item.where}: {option} {why}; for a short run set trainer.max_epochs and "
                             "trainer.limit_train_batches instead")
    item = given.get("trainer.enable_checkpointing")
    if item is not None and item.value is False:
        raise ValueError(f"{item.where}: trainer.enable_checkpointing false: a fit tests the weights its checkpoints "
                         "hold (evaluation.selection.epoch), so it needs them")


def _check_heads(given: Settings, losses: Mapping[str, Mapping[str, Any]]) -> None:
    """Each loss head a name of the registry (or a class path), of the kind its targets need; its ``*_args`` the
    head's parameters."""
    if not losses:
        return
    for option, targets in HEADS.items():
        head = given.get(option)
        if head is None or not isinstance(head.value, str):
            continue
        name = head.value
        if name not in losses:
            near = difflib.get_close_matches(name, list(losses), n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            raise ValueError(f"{head.where}: unknown loss {name!r}; {hint}choose one of: {', '.join(losses)}, or give "
                             "{class_path: package.module.YourLoss, init_args: {...}}")
        graded = losses[name]["graded"]
        if targets != "qrels" and graded:
            use = ("a distillation head: distill_listnet, distill_ranknet or margin_mse" if targets == "teacher"
                   else "a click head: click_softmax, click_bce or dla")
            raise ValueError(f"{head.where}: {option} {name!r} takes graded labels; use {use}")
        arguments = given.get(f"{option}_args")
        if arguments is not None and isinstance(arguments.value, dict):
            unknown = sorted(set(arguments.value) - set(losses[name]["parameters"]))
            if unknown:
                accepted = ", ".join(losses[name]["parameters"]) or "none"
                raise ValueError(f"{arguments.where}: loss {name!r} has no parameter {', '.join(unknown)}; it accepts: "
                                 f"{accepted}")


def _check_section(given: Settings, section: str, build: Callable[..., Any]) -> None:
    """Build ``section``'s dataclass from what ``given`` sets of it (unset fields keep their defaults)."""
    whole = given.get(section)
    if whole is not None and not isinstance(whole.value, dict):
        return  # null (the default), or a value the parser judges
    fields = {key[len(section) + 1:]: item for key, item in given.items()
              if key.startswith(f"{section}.") and "." not in key[len(section) + 1:]}
    if whole is None and not fields:
        return
    values = {**(whole.value if whole is not None else {}), **{name: item.value for name, item in fields.items()}}
    names = {field.name for field in dataclasses.fields(build)}
    try:
        build(**{name: value for name, value in values.items() if name in names})
    except (TypeError, ValueError) as error:
        message = str(error)
        named = [item for name, item in sorted(fields.items(), key=lambda pair: -len(pair[0]))
                 if re.search(rf"\b{re.escape(name)}\b", message)]
        where = (named[0] if named else next(iter(fields.values()), whole)).where
        raise ValueError(f"{where}: {message}") from None


def _collection(given: Settings) -> dict[str, Given]:
    """``data.collection``'s keys, each with where it was set: a whole mapping (a later one in stacked configs
    replaces an earlier one), then each ``--data.collection.KEY value``."""
    collection = given.get("data.collection")
    found = ({name: Given(value, collection.where) for name, value in collection.value.items()}
             if collection is not None and isinstance(collection.value, dict) else {})
    found.update({key.removeprefix("data.collection."): item for key, item in given.items()
                  if key.startswith("data.collection.")})
    return found


def _check_collection(given: Settings) -> None:
    """``data.collection`` as the data module reads it."""
    keys = _collection(given)
    if not keys:
        return
    try:
        as_collection_config({name: item.value for name, item in keys.items()}, "data.collection")
    except ValueError as error:
        message = str(error)
        named = ([item for name, item in keys.items() if f"collection.{name}" in message]
                 or [item for name, item in keys.items() if re.search(rf"\b{re.escape(name)}\b", message)])
        raise ValueError(f"{(named or list(keys.values()))[-1].where}: {message}") from None


def _check_sources(given: Settings) -> None:
    """``data.train``'s sources, each as the data module builds it."""
    sources = given.get("data.train")
    if sources is not None and isinstance(sources.value, list):
        try:
            as_source_configs([source or {} for source in sources.value], "data.train")
        except (TypeError, ValueError) as error:
            raise ValueError(f"{sources.where}: {error}") from None


def _check_measures(given: Settings) -> None:
    """The reported measures and the selection measure: names trec_eval knows, the latter among the former."""
    from ..evaluation.measures import METRICS, check_measures

    metrics, measure = given.get("evaluation.metrics"), given.get("evaluation.selection.measure")
    if metrics is None and measure is None:
        return
    names = metrics.value if metrics is not None else list(METRICS)
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"{metrics.where}: evaluation.metrics is a list of measure names, e.g. [nDCG@10, RR@10, AP]")
    chosen = measure.value if measure is not None else SelectionRules.measure
    try:
        check_measures(names, str(chosen))
    except ValueError as error:
        unknown = re.match(r"unknown measure '([^']*)'", str(error))
        at_measure = measure is not None and (unknown is None or unknown[1] == str(chosen))
        where = (measure if at_measure else metrics or measure).where
        raise ValueError(f"{where}: {error}") from None


def _check_devices(given: Settings) -> None:
    accelerator = given.get("trainer.accelerator")
    if accelerator is not None and isinstance(accelerator.value, str) and accelerator.value not in ACCELERATORS:
        raise ValueError(f"{accelerator.where}: trainer.accelerator must be one of {', '.join(ACCELERATORS)}; got "
                         f"{accelerator.value!r}")
    devices = given.get("trainer.devices")
    if devices is not None:
        value = devices.value
        valid = (isinstance(value, int) and not isinstance(value, bool) and value >= -1) or value == "auto" or (
            isinstance(value, str) and re.fullmatch(r"-1|\d+(,\s*\d+)*,?", value.strip()) is not None) or (
            isinstance(value, list) and all(isinstance(item, int) and item >= 0 for item in value))
        if not valid:
            raise ValueError(f"{devices.where}: trainer.devices must be a number of devices (-1: all), auto, or a list "
                             f"of device indices such as [0, 1]; got {value!r}")
    device = given.get("serve.device")
    if device is not None and device.value is not None and not DEVICE.match(str(device.value)):
        raise ValueError(f"{device.where}: serve.device must be cpu, cuda, cuda:N or mps; got {device.value!r}")


def _check_logger(given: Settings) -> None:
    """``trainer.logger``: a Lightning logger (or a class path) whose package is installed."""
    logger = given.get("trainer.logger")
    if logger is None:
        return
    for item in logger.value if isinstance(logger.value, list) else [logger.value]:
        path = item.get("class_path") if isinstance(item, dict) else item
        if not isinstance(path, str) or path.lower() in ("true", "false"):
            continue
        name = path.rsplit(".", 1)[-1]
        if "." not in path and name not in LOGGERS:
            near = difflib.get_close_matches(name, list(LOGGERS), n=1)
            hint = f"did you mean {near[0]}? " if near else ""
            raise ValueError(f"{logger.where}: trainer.logger {path!r} is not one of Lightning's loggers; {hint}one of "
                             f"{', '.join(LOGGERS)}, or a class path (my_package.MyLogger)")
        package = LOGGERS.get(name) if path.startswith(("lightning.", "pytorch_lightning.")) or "." not in path \
            else path.split(".", 1)[0]
        if package is not None and not _installed(package):
            install = LOGGER_PACKAGES.get(package, package)
            raise ValueError(f"{logger.where}: trainer.logger {path} needs the package {package}, which is not "
                             f"installed: pip install {install}")


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def check_paths(command: str, given: Settings) -> None:
    """The files and folders the options name exist: a model given as a local path, the collection's files, the
    first stage's and the teachers' runs, a checkpoint to resume from.

    Raises:
        FileNotFoundError: naming the option where it was written, and the path.
    """
    for key, what in _paths(command, given):
        item = given[key] if key in given else None
        value = item.value if item is not None else None
        if isinstance(value, str) and value and not Path(value).expanduser().exists():
            raise FileNotFoundError(f"{item.where}: {what} {value} does not exist")
    model = given.get("model.model_name")
    if model is not None and isinstance(model.value, str) and _local(model.value) \
            and not Path(model.value).expanduser().exists():
        raise FileNotFoundError(f"{model.where}: model.model_name {model.value}: no such folder (give a folder, or a "
                                "Hugging Face hub id such as sentence-transformers/all-MiniLM-L6-v2)")
    for name, item in _collection(given).items():
        if name in ("docs", "queries", "qrels") and isinstance(item.value, str) \
                and not Path(item.value).expanduser().exists():
            raise FileNotFoundError(f"{item.where}: data.collection.{name} {item.value}: no such file")
    for where, run in _teacher_runs(given):
        if not Path(run).expanduser().exists():
            raise FileNotFoundError(f"{where}: teacher.run {run}: no such file")


def _paths(command: str, given: Settings) -> Iterator[tuple[str, str]]:
    backend = given.get("data.first_stage.backend")
    if backend is not None and backend.value == "run":
        yield "data.first_stage.run", "the first stage's run"
    yield "run", "the run"
    ckpt = given.get("ckpt_path")
    if command in ("fit", "cv") and ckpt is not None and ckpt.value not in (None, "last"):
        yield "ckpt_path", "the checkpoint"


def _teacher_runs(given: Settings) -> Iterator[tuple[str, str]]:
    for key in ("data.train", "pretrain.train"):
        sources = given.get(key)
        if sources is None or not isinstance(sources.value, list):
            continue
        for source in sources.value:
            teacher = source.get("teacher") if isinstance(source, dict) else None
            if isinstance(teacher, dict) and isinstance(teacher.get("run"), str):
                yield sources.where, teacher["run"]


def _local(name: str) -> bool:
    """Whether a model name is a path rather than a hub id (``org/name``)."""
    return name.startswith(("/", "./", "../", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)


def registry() -> dict[str, Any]:
    """What the checks need of the libraries' registries, for the stored schema: each loss head, whether it takes
    graded labels, and its parameters (imports torch: made once per install, with the schema)."""
    import inspect

    from ..losses import LOSSES

    return {"losses": {name: {"graded": bool(cls.graded),
                              "parameters": [name for name in inspect.signature(cls.__init__).parameters
                                             if name not in ("self", "args", "kwargs")]}
                       for name, cls in LOSSES.items()}}
