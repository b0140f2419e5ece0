"""The log: known-harmless library messages are filtered in one place (rerank/core/logs.py), anything else shows."""

from __future__ import annotations

import logging
import os
import warnings

import pytest
from helpers import MINILM_VOCAB

from rerank.core.logs import configure_logging


def test_library_noise_is_filtered_even_where_a_library_resets_its_level() -> None:
    configure_logging()
    library = logging.getLogger("ir_datasets")
    library.setLevel(logging.INFO)  # what ir_datasets does at its first use, after rerank configured the log

    def record(level: int) -> logging.LogRecord:
        return library.makeRecord("ir_datasets", level, __file__, 1, "Opening a doc store", None, None)

    assert not library.filter(record(logging.INFO)) and library.filter(record(logging.WARNING))
    with warnings.catch_warnings(record=True) as caught:
        configure_logging()
        warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated, use ...", DeprecationWarning, stacklevel=1)
        warnings.warn("a warning nobody has vetted", UserWarning, stacklevel=1)
    assert [str(warning.message) for warning in caught] == ["a warning nobody has vetted"]


@pytest.mark.skipif(MINILM_VOCAB is None or os.environ.get("HF_HUB_OFFLINE") != "1",
                    reason="needs ../shared/hf_home, offline (tests/conftest.py sets both)")
def test_a_cached_model_loads_offline_without_the_hubs_warning() -> None:
    from sentence_transformers import SentenceTransformer

    configure_logging()
    hub = logging.getLogger("huggingface_hub.hf_api")
    shown: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: shown.append(record.getMessage())  # type: ignore[method-assign]
    hub.addHandler(handler)
    try:
        SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2", device="cpu")  # offline, from the cache
        hub.warning("Ignored error while caching commit hash for 'a/model': read-only")  # any other: shown
    finally:
        hub.removeHandler(handler)
    assert shown == ["Ignored error while caching commit hash for 'a/model': read-only"]
