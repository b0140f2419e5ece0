"""The scoring model: loading encoders and trained cross-encoders, the head, tokenization, saving."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import SHARED
from helpers import tiny_bert
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from rerank.cross_encoder import CrossEncoderModel
from rerank.data.tokenization import TokenizationConfig


def score_pairs(model: CrossEncoderModel, queries: list[str], documents: list[str]) -> torch.Tensor:
    with torch.no_grad():
        return model.score(model.pair_tokenizer()(queries, documents))

def test_encoder_gets_a_one_output_head_and_scores_pairs(tmp_path: Path) -> None:
    model = CrossEncoderModel.from_pretrained(str(tiny_bert(tmp_path / "bert")))
    scores = score_pairs(model, ["wind tunnel", "heat"], ["similarity laws model", "heat flux"])
    assert scores.shape == (2,) and torch.isfinite(scores).all()
    head, encoder = model.head_parameters(), model.encoder_parameters()
    assert {id(p) for p in head}.isdisjoint(id(p) for p in encoder)
    assert len(head) + len(encoder) == len(list(model.parameters()))
    assert sum(p.numel() for p in head) == 32 + 1  # the linear layer on the [CLS] vector


def test_trained_cross_encoder_keeps_its_head_and_saved_folders_load_with_transformers(tmp_path: Path) -> None:
    folder = tiny_bert(tmp_path / "trained", with_head=True)
    reference = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    model = CrossEncoderModel.from_pretrained(str(folder)).eval()
    encoded = model.tokenizer(["wind"], ["wind tunnel"], return_tensors="pt")
    torch.testing.assert_close(model(**encoded), reference(**encoded).logits.squeeze(-1))
    model.tokenization = TokenizationConfig(max_length=48, max_query_length=8, passages="maxp", stride=4)
    model.save_pretrained(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "model.safetensors").exists()
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "saved").eval()
    torch.testing.assert_close(model(**encoded), reloaded(**encoded).logits.squeeze(-1))
    assert CrossEncoderModel.from_pretrained(str(tmp_path / "saved")).tokenization == model.tokenization
    assert AutoTokenizer.from_pretrained(tmp_path / "saved").model_max_length == 48


def test_gradient_checkpointing_gives_the_same_gradients(tmp_path: Path) -> None:
    folder = tiny_bert(tmp_path / "bert", with_head=True, dropout=0.0)  # no dropout anywhere, attention's included
    grads = []
    for checkpointing in (False, True):
        model = CrossEncoderModel.from_pretrained(str(folder), dropout=0.0, gradient_checkpointing=checkpointing)
        model.train()
        for module in model.modules():  # no dropout anywhere: the two runs must match exactly
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        encoded = model.tokenizer(["wind", "heat"], ["wind tunnel", "flux"], return_tensors="pt", padding=True)
        model(**encoded).sum().backward()
        grads.append(model.model.base_model.embeddings.word_embeddings.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])


def test_missing_model_is_named(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"model '.*no-such-model' not found"):
        CrossEncoderModel.from_pretrained(str(tmp_path / "no-such-model"))


@pytest.mark.skipif(not (SHARED / "hf_home").is_dir(), reason="needs ../shared/hf_home")
def test_minilm_loads_offline_from_the_hugging_face_cache() -> None:
    model = CrossEncoderModel.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")
    assert model.model.config.num_hidden_layers == 6 and model.model.config.hidden_size == 384
    encoder = AutoModel.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")
    torch.testing.assert_close(model.model.base_model.embeddings.word_embeddings.weight,
                               encoder.embeddings.word_embeddings.weight)


def test_length_sorted_chunks_give_the_same_scores_and_gradients(tmp_path: Path) -> None:
    model = CrossEncoderModel.from_pretrained(str(tiny_bert(tmp_path / "bert", dropout=0.0)))
    documents = ["wind", "heat flux laws similarity model", "tunnel", "aircraft model query document wind heat",
                 "laws", "flux flux flux"]
    encoded = model.tokenizer(["query"] * len(documents), documents, padding=True, return_tensors="pt")
    whole = model(**encoded)
    whole.pow(2).sum().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    chunked = model(**encoded, chunk_size=4)
    chunked.pow(2).sum().backward()
    torch.testing.assert_close(chunked, whole, atol=1e-6, rtol=1e-5)
    for grad, reference in zip((p.grad for p in model.parameters()), expected):
        torch.testing.assert_close(grad, reference, atol=1e-6, rtol=1e-4)
