"""The log of every command: rerank's lines in one format, known-harmless library warnings filtered here, once.

Each filter names the library and why its message does not concern a rerank user; anything else is shown. Set
``RERANK_DEBUG=1`` to see everything (and tracebacks of user errors, :mod:`rerank.cli`).

The console shows rerank's own words at INFO. A command that writes a run directory also keeps the whole log there,
``rerank.log``, with rerank's DEBUG lines: what third-party tools say that a user cannot act on (the JVM's indexer
lines, for one: :mod:`rerank.first_stage`) goes there only. Records are held from the start of the command
(:func:`configure_logging`) until :func:`keep_log` names the file, so the file begins with the first line.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import re
import warnings
from pathlib import Path

HARMLESS_WARNINGS = (
    # LightningCLI, when a command is called from Python while sys.argv holds the caller's own arguments (tests)
    r"LightningCLI's args parameter is intended to run from within Python",
    # Lightning, on a CPU: 16-mixed runs as bf16-mixed (the README says so), and the single-core DataLoader hint
    r"AMP with fp16 is not supported on CPU",
    r"The '.*_dataloader' does not have many workers",
    r"GPU available but not used",
    # Lightning: the predict loop and evaluation loops run without a logger in rerank's commands
    r"You called `self.log\(.*\)` but have no logger configured",
    r"Checkpoint directory .* exists and is not empty",
    # Lightning, resuming mid-epoch: rerank's data module saves where the pass stands and its sampler skips the
    # batches already trained on (RerankDataModule.state_dict), which rerank logs itself
    r"You're resuming from a checkpoint that ended before the epoch ended",
    # transformers: a new one-output head on an encoder that never had one (rerank logs that itself)
    r"You passed `num_labels=1` which is incompatible",
    # Lightning: its default logger falls back to CSV without tensorboard; a torch API it calls is deprecated
    r"Starting from v1.9.0, `tensorboardX` has been removed",
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
)
HARMLESS_LOGGERS = {
    "transformers.modeling_utils": logging.ERROR,  # the "newly initialized: classifier" report (logged by rerank)
    "transformers.configuration_utils": logging.ERROR,
    "transformers.distributed.tensor_parallel": logging.ERROR,  # "layers were not sharded": no tensor parallelism
    "sentence_transformers": logging.WARNING,  # "Loading SentenceTransformer model from ..." at every load
    "ir_datasets": logging.WARNING,  # "Opening ... with direct file access" at every document lookup
    "lightning.pytorch.utilities.rank_zero": logging.WARNING,  # "GPU available: False" banners
    "lightning.pytorch.callbacks.model_summary": logging.WARNING,  # the parameter table ("Total FLOPs: 0" on a CPU)
    "lightning.fabric.utilities.seed": logging.WARNING,  # "Seed set to 42" (the seed is in the run's config.yaml)
}
HARMLESS_RECORDS = {
    # huggingface_hub, offline as the user asked (HF_HUB_OFFLINE=1): the model is read from the cache, as it should be
    "huggingface_hub.hf_api": r"Could not reach the Hub \(.*offline mode is enabled",
}


FORMAT = "%(levelname)s %(name)s: %(message)s"
LOG_FILE = "rerank.log"
"""The whole log of a command, in its run directory (:func:`keep_log`)."""
_HELD = logging.handlers.MemoryHandler(capacity=1_000_000, flushLevel=logging.CRITICAL + 1)
"""The records of the command so far, until :func:`keep_log` writes them to the run directory."""


def configure_logging(hold: bool = False) -> None:
    """INFO for rerank's lines on the console, the filters above for the rest (all off with ``RERANK_DEBUG``);
    ``hold``: also hold every record, rerank's DEBUG ones too, for the run directory's log (:func:`keep_log`)."""
    logging.basicConfig(level=logging.INFO, format=FORMAT)
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler is _HELD or isinstance(handler, logging.FileHandler):  # an earlier command's, in this process
            root.removeHandler(handler)
            if handler is not _HELD:
                handler.close()
        else:
            handler.setLevel(logging.INFO)
    _HELD.buffer.clear()
    if hold:
        _HELD.setFormatter(logging.Formatter("%(asctime)s " + FORMAT))
        root.addHandler(_HELD)
    logging.getLogger("rerank").setLevel(logging.DEBUG if hold else logging.NOTSET)
    if os.environ.get("RERANK_DEBUG"):
        return
    for pattern in HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    for name, level in HARMLESS_LOGGERS.items():
        library = logging.getLogger(name)
        library.setLevel(level)  # records below it are not even made...
        library.addFilter(_FILTERS.setdefault((name, level), _Harmless(level=level)))  # ...until it resets it
    for name, pattern in HARMLESS_RECORDS.items():
        logging.getLogger(name).addFilter(_FILTERS.setdefault((name, pattern), _Harmless(pattern=pattern)))


def keep_log(directory: Path) -> Path:
    """Write the command's held log (:func:`configure_logging` with ``hold``), and from now on every record, to
    ``directory/rerank.log`` (appended to: a resumed run keeps its earlier lines)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOG_FILE
    kept = logging.FileHandler(path, encoding="utf-8")
    kept.setFormatter(logging.Formatter("%(asctime)s " + FORMAT))
    root = logging.getLogger()
    _HELD.setTarget(kept)
    _HELD.flush()
    _HELD.setTarget(None)
    root.removeHandler(_HELD)
    root.addHandler(kept)
    return path


class _Harmless(logging.Filter):
    """Drops records below a level or whose message matches a pattern. Unlike a logger's level, a filter stays when
    the library sets its own level at first use (ir_datasets does), and it holds before the library's own handler
    (huggingface_hub has one) as before the root's."""

    def __init__(self, level: int = logging.NOTSET, pattern: str | None = None) -> None:
        super().__init__()
        self.level = level
        self.pattern = re.compile(pattern) if pattern else None

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level and not (self.pattern and self.pattern.search(record.getMessage()))


_FILTERS: dict[tuple[str, int | str], _Harmless] = {}
"""One filter per logger and rule, however often the log is configured (each command configures it)."""
