"""Shared test helpers."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
from pathlib import Path
from types import ModuleType

import torch
import yaml
from lightning.pytorch import Callback
from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertConfig, BertModel

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
MINILM = "hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/*/vocab.txt"
MINILM_VOCAB = next((SHARED / "hf_home").glob(MINILM), None)
CRANFIELD = yaml.safe_load((REPO / "rerank" / "configs" / "collections" / "cranfield.yaml").read_text())["data"][
    "collection"]
"""Cranfield's collection section, label map included, as the default config has it."""
WORDS = ["wind", "tunnel", "heat", "flux", "laws", "similarity", "aircraft", "model", "query", "document"]


SCRIPTS = {path.name: path for path in sorted((REPO / "scripts").rglob("*")) if path.suffix in (".py", ".sh")}
"""Every script of ``scripts/`` (benchmarks, data tools, studies) by its file name, which is unique."""


def script_path(name: str) -> Path:
    """The path of script ``name`` (its file name: ``split_half_epoch.py``) wherever it stands under ``scripts/``."""
    return SCRIPTS[name]


def load_script(name: str) -> ModuleType:
    """Script ``name`` (``name.py`` under ``scripts/``) as a module (registered in ``sys.modules``, where dataclasses
    look their module up)."""
    path = script_path(f"{name}.py")
    if str(path.parent) not in sys.path:  # as ``python path/name.py`` runs it: its folder's modules importable
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    script = importlib.util.module_from_spec(spec)
    sys.modules[name] = script
    spec.loader.exec_module(script)
    return script


def random_lists(
    queries: int, length: int, grades: int = 3, seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random scores and graded labels ``[queries, length]``; every list has at least two different labels."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(queries, length, generator=generator, dtype=dtype)
    labels = torch.randint(0, grades, (queries, length), generator=generator)
    labels[:, 0], labels[:, 1] = grades - 1, 0
    return scores, labels


def flat(values: dict, prefix: str = "") -> dict:
    """A nested mapping as ``{"a.b": value}`` (what ``pytest.approx`` compares)."""
    found = {}
    for key, value in values.items():
        if isinstance(value, dict):
            found |= flat(value, f"{prefix}{key}.")
        else:
            found[f"{prefix}{key}"] = value
    return found


def tiny_bert(folder: Path, with_head: bool = False, real_vocabulary: bool = False, dropout: float = 0.1) -> Path:
    """A 2-layer random BERT (hidden size 32) saved as a Hugging Face folder.

    Its WordPiece vocabulary has 15 words, or MiniLM's 30,522 (``real_vocabulary``: for training on real text).
    """
    folder.mkdir(parents=True, exist_ok=True)
    vocabulary = folder / "vocab.txt"
    if real_vocabulary:
        vocabulary.write_bytes(MINILM_VOCAB.read_bytes())
    else:
        vocabulary.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    size = sum(1 for _ in vocabulary.open(encoding="utf-8"))
    config = BertConfig(vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=512, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout, initializer_range=0.2, num_labels=1)
    torch.manual_seed(0)
    if with_head:
        AutoModelForSequenceClassification.from_config(config).save_pretrained(folder)
    else:
        BertModel(config).save_pretrained(folder)
    save_tokenizer(folder)
    return folder


def save_tokenizer(folder: Path) -> None:
    """A BERT WordPiece tokenizer over ``folder/vocab.txt``, saved in ``folder`` (the way that works in transformers
    4 and 5 alike: their tokenizer classes take the vocabulary under different names)."""
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer",
                                                              "do_lower_case": True, "model_max_length": 512}))
    AutoTokenizer.from_pretrained(folder).save_pretrained(folder)


class KillAtStep(Callback):
    """Kills the process (SIGKILL, no clean-up) when training reaches optimizer step ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def cranfield_workdir(folder: Path, dropout: float = 0.1) -> Path:
    """``folder`` with ``bert/`` (a tiny BERT with MiniLM's vocabulary) and ``bm25.run`` (Cranfield, bm25s, top 20)."""
    from rerank.data.collection import Collection
    from rerank.data.collection_config import CollectionConfig
    from rerank.data.trec import write_run
    from rerank.first_stage import FirstStageConfig, retrieve

    tiny_bert(folder / "bert", real_vocabulary=True, dropout=dropout)
    run = retrieve(Collection(CollectionConfig(**CRANFIELD)),
                   FirstStageConfig(backend="bm25s", retrieval_depth=20, index_dir=str(folder / "idx")))
    write_run(run, folder / "bm25.run")
    return folder


def tiny_cv_config(workdir: Path, teacher: Path | None = None) -> dict:
    """A 3-fold cross-validation config of ``workdir``'s tiny BERT on Cranfield (:func:`cranfield_workdir`): BM25's
    top 10 re-ranked in lists of 4, one epoch of 2 steps a fold. With ``teacher`` (a run), the training folds learn
    from its scores beside their qrels."""
    config = {"model": {"model_name": str(workdir / "bert"), "loss": "listnet",
                        "tokenization": {"max_length": 48, "max_query_length": 16}},
              "data": {"collection": CRANFIELD, "first_stage": {"backend": "run", "run": str(workdir / "bm25.run")},
                       "folds": {"scheme": "kfold", "count": 3, "seed": 7}, "rerank_depth": 10, "list_size": 4,
                       "batch_size": 2},
              "trainer": {"max_epochs": 1, "limit_train_batches": 2, "enable_progress_bar": False, "logger": False,
                          "num_sanity_val_steps": 0}}
    if teacher is not None:
        config["data"]["train"] = [{"queries": "train", "targets": "both", "teacher": {"run": str(teacher)}}]
    return config


def tiny_bi_encoder(folder: Path) -> Path:
    """A sentence-transformers bi-encoder (mean pooling, normalised) around a tiny random BERT."""
    from sentence_transformers import SentenceTransformer
    try:
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:  # sentence-transformers before 6
        from sentence_transformers.models import Normalize, Pooling, Transformer

    bert = tiny_bert(folder / "bert", real_vocabulary=True)
    transformer = Transformer(str(bert), max_seq_length=64)
    model = SentenceTransformer(modules=[transformer, Pooling(32, "mean"), Normalize()])
    model.save(str(folder / "st"))
    return folder / "st"
