"""The scoring model: loading encoders and trained cross-encoders, the head, tokenization, saving."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import SHARED
from helpers import tiny_bert
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from rerank.config.tokenization import TokenizationConfig
from rerank.model.cross_encoder import CrossEncoderModel
from rerank.model.tokenization import PairInputs, PairTokenizer, head
from rerank.training.batches import EvaluationBatch, TrainingBatch


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


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_equals_the_tokenizers_own(tmp_path: Path, side: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert(tmp_path / "bert"))
    tokenizer.padding_side = side
    tokenizer.pad_token = "[MASK]"  # a pad id other than 0, so that a zero fill would show
    pairs = PairTokenizer(tokenizer, TokenizationConfig(max_length=24, max_query_length=4))
    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    documents = [" ".join(words[: 1 + length % len(words)] * (1 + length // 3)) for length in range(9)]
    rows, pair_of_row = pairs.encode(["alpha beta"] * len(documents), documents)
    assert len({len(ids) for ids in rows["input_ids"]}) > 3  # rows of several lengths
    padded = pairs.pad(rows, pair_of_row)
    reference = tokenizer.pad(rows, return_tensors="pt")
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert torch.equal(getattr(padded, key), reference[key]), key
    assert padded.passage_to_pair.tolist() == pair_of_row


@pytest.mark.parametrize("passages", ["first", "maxp"])
def test_long_documents_give_the_rows_of_the_whole_text(tmp_path: Path, passages: str) -> None:
    """Documents are cut to their head before tokenization (a 30,000-word one would be read whole): the rows are
    those that the tokenizer makes of the whole texts, here 20 times longer than a row, with punctuation (more
    tokens than words) and words that the tokenizer drops (fewer)."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert(tmp_path / "bert"))
    config = TokenizationConfig(max_length=24, max_query_length=4, passages=passages, stride=5, max_passages=2)
    pairs = PairTokenizer(tokenizer, config)
    words = "wind, tunnel heat-flux \u0301 laws \x07 aircraft.".split()
    documents = [" ".join(words[(i + k) % len(words)] for k in range(length)) for i, length in
                 enumerate([3, 24, 60, 100, 480])]
    rows, pair_of_row = pairs.encode(["wind tunnel"] * len(documents), documents)
    whole = tokenizer(["wind tunnel"] * len(documents), documents, truncation="only_second", max_length=24,
                      stride=5 if passages == "maxp" else 0, return_overflowing_tokens=passages == "maxp")
    mapping = whole.get("overflow_to_sample_mapping", list(range(len(documents))))
    kept = [row for row, pair in enumerate(mapping) if mapping[:row].count(pair) < config.max_passages]
    assert rows["input_ids"] == [whole["input_ids"][row] for row in kept]
    assert pair_of_row == [mapping[row] for row in kept]
    assert len(kept) == (9 if passages == "maxp" else 5)
    assert len(head(documents[-1], 2 * 24 * 2)) < len(documents[-1]) // 4  # what was tokenized was cut
    assert head("wind  tunnel\nheat flux", 2) == "wind  tunnel\n" and head("wind tunnel", 2) == "wind tunnel"


def test_pinned_batches_pin_every_tensor_and_share_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    pinned: list[torch.Tensor] = []

    def pin(tensor: torch.Tensor) -> torch.Tensor:  # page-locked memory needs a GPU: a copy stands in for it
        pinned.append(tensor.clone())
        return pinned[-1]

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    ones = torch.ones(2, 3, dtype=torch.long)
    inputs = PairInputs(torch.arange(6).view(2, 3), ones, torch.zeros_like(ones))
    batch = TrainingBatch(inputs=inputs, labels=torch.tensor([[1, 0]]), mask=torch.ones(1, 2, dtype=torch.bool),
                          slots=torch.arange(2))
    copy = batch.pin_memory()
    tensors = [copy.inputs.input_ids, copy.inputs.attention_mask, copy.inputs.token_type_ids, copy.labels, copy.mask,
               copy.slots]
    assert [id(tensor) for tensor in tensors] == [id(tensor) for tensor in pinned]  # each one pinned, once
    originals = [inputs.input_ids, inputs.attention_mask, inputs.token_type_ids, batch.labels, batch.mask, batch.slots]
    assert all(torch.equal(new, old) for new, old in zip(tensors, originals))
    assert copy.teacher is None and copy.inputs.passage_to_pair is None
    evaluation = EvaluationBatch(inputs=inputs, query_ids=["q1", "q1"], doc_ids=["d1", "d2"],
                                 first_stage_scores=torch.tensor([2.0, 1.0]))
    assert evaluation.pin_memory().query_ids is evaluation.query_ids  # what is not a tensor is shared


def test_encoder_dropout_zero_makes_training_forwards_deterministic(tmp_path: Path) -> None:
    folder = str(tiny_bert(tmp_path / "bert", dropout=0.3))
    inputs = CrossEncoderModel.from_pretrained(folder).pair_tokenizer()(["wind tunnel"] * 4, ["heat flux model"] * 4)
    stock = CrossEncoderModel.from_pretrained(folder).train()
    assert not torch.equal(stock.score(inputs), stock.score(inputs))  # dropout at 0.3 in the encoder
    quiet = CrossEncoderModel.from_pretrained(folder, encoder_dropout=0.0, dropout=0.0).train()
    config = quiet.model.config
    assert (config.hidden_dropout_prob, config.attention_probs_dropout_prob) == (0.0, 0.0)
    torch.testing.assert_close(quiet.score(inputs), quiet.score(inputs), rtol=0, atol=0)
    torch.testing.assert_close(quiet.score(inputs), quiet.eval().score(inputs))  # as in evaluation


def test_frozen_embeddings_keep_their_weights_while_the_rest_trains(tmp_path: Path) -> None:
    from rerank.training.lightning_module import RerankModule

    module = RerankModule(model_name=str(tiny_bert(tmp_path / "bert")), loss="listnet", freeze_embeddings=True,
                          tokenization=TokenizationConfig(max_length=16, max_query_length=4))
    embeddings = dict(module.model.model.base_model.embeddings.named_parameters())
    assert embeddings and not any(parameter.requires_grad for parameter in embeddings.values())
    before = {name: parameter.detach().clone() for name, parameter in module.model.named_parameters()}
    optimizer = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=0.1)
    inputs = module.model.pair_tokenizer()(["wind tunnel"] * 3, ["heat flux", "wind model", "tunnel laws"])
    module.heads["qrels"].loss(module.model.score(inputs).view(1, 3), torch.tensor([[1, 0, 0]])).backward()
    optimizer.step()
    changed = {name for name, parameter in module.model.named_parameters() if not torch.equal(parameter, before[name])}
    assert changed and not any(".embeddings." in name for name in changed)
    assert any(".encoder." in name for name in changed)
    with pytest.raises(ValueError, match=r"model.encoder_dropout must be in \[0, 1\); got 1.0"):
        RerankModule(model_name=str(tmp_path / "bert"), encoder_dropout=1.0)
