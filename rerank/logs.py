"""The log of every command: rerank's lines in one format, known-harmless library warnings filtered here, once.

Each filter names the library and why its message does not concern a rerank user; anything else is shown. Set
``RERANK_DEBUG=1`` to see everything (and tracebacks of user errors, :mod:`rerank.cli`).
"""

from __future__ import annotations

import logging
import os
import re
import warnings

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
}
HARMLESS_RECORDS = {
    # huggingface_hub, offline as the user asked (HF_HUB_OFFLINE=1): the model is read from the cache, as it should be
    "huggingface_hub.hf_api": r"Could not reach the Hub \(.*offline mode is enabled",
}


def configure_logging() -> None:
    """INFO for rerank's lines, the filters above for the rest (all off with ``RERANK_DEBUG``)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
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
