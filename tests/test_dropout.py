"""rerank.dropout: cheap CPU dropout masks, checked against the Bernoulli distribution and PyTorch's attention."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import tiny_bert

from rerank.dropout import FastDropout, attention, dropout_mask, fast_dropout
from rerank.model import CrossEncoder


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_each_element_is_dropped_with_probability_p(p: float) -> None:
    torch.manual_seed(0)
    count = 1_000_000
    out = fast_dropout(torch.ones(count), p, training=True)
    dropped = out == 0
    tolerance = 5 * math.sqrt(p * (1 - p) / (count // 4))
    for part in range(4):  # the four 16-bit parts of each random word are each uniform
        assert dropped[part::4].float().mean().item() == pytest.approx(p, abs=tolerance)
    kept = out[~dropped]
    assert torch.all(kept == kept[0]) and kept[0].item() == pytest.approx(1 / (1 - p), rel=1e-4)
    assert out.mean().item() == pytest.approx(1.0, abs=5 * math.sqrt(p / (1 - p) / count))
    pairs = dropped[:-1] & dropped[1:]  # neighbours drop independently
    assert pairs.float().mean().item() == pytest.approx(p * p, abs=5 * math.sqrt(p * p / count))


def test_masks_follow_the_seed_and_gradients_follow_the_mask() -> None:
    x = torch.randn(3, 50, requires_grad=True)
    torch.manual_seed(1)
    first = fast_dropout(x, 0.3, training=True)
    torch.manual_seed(1)
    assert torch.equal(fast_dropout(x, 0.3, training=True), first)
    assert not torch.equal(fast_dropout(x, 0.3, training=True), first)
    first.sum().backward()
    scale = 1 / (1 - round(0.3 * 2**15) / 2**15)
    assert torch.allclose(x.grad, (first != 0).float() * scale)
    assert torch.equal(fast_dropout(x, 0.3, training=False), x) and torch.equal(FastDropout(0.3).eval()(x), x)


def test_attention_is_pytorch_attention_with_unbiased_dropout() -> None:
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 3, 5, 8) for _ in range(3))
    keys = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, None, :].expand(2, 1, 5, 5)
    value[1, :, 3:] = 1e6  # masked keys: must never leak into the output
    module = torch.nn.Module()
    module.is_causal = False
    expected = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=keys).transpose(1, 2)
    exact, _ = attention(module, query, key, value, keys)
    assert torch.allclose(exact, expected, atol=1e-6)
    draws = torch.stack([attention(module, query, key, value, keys, dropout=0.5)[0] for _ in range(4000)])
    assert draws.abs().max() < 1e3
    assert torch.allclose(draws.mean(0), expected, atol=0.1)  # inverted dropout keeps the expectation
    assert draws.std(0).min() > 0.01
    inputs = [tensor.clone().requires_grad_() for tensor in (query, key, value)]
    torch.manual_seed(3)
    attention(module, *inputs, keys, dropout=0.2, scaling=0.3)[0].pow(2).sum().backward()
    reference = [tensor.clone().requires_grad_() for tensor in (query, key, value)]
    torch.manual_seed(3)  # the same draws, through plain differentiable operations
    probabilities = (reference[0] @ reference[1].transpose(-1, -2) * 0.3).masked_fill(~keys, -1e9).softmax(-1)
    keep, scale = dropout_mask(probabilities.shape, 0.2, probabilities.device)
    (probabilities * keep * scale @ reference[2]).transpose(1, 2).pow(2).sum().backward()
    for ours, theirs in zip(inputs, reference):
        assert torch.allclose(ours.grad, theirs.grad, atol=1e-5)


def test_the_cross_encoder_trains_with_fast_dropout_and_scores_like_the_plain_model(tmp_path: Path) -> None:
    folder = tiny_bert(tmp_path / "bert", dropout=0.1)
    model = CrossEncoder.from_pretrained(str(folder))
    assert model.model.config._attn_implementation == "rerank_sdpa"
    dropouts = [m for m in model.model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(isinstance(m, FastDropout) for m in dropouts)
    inputs = model.tokenizer(["wind tunnel"] * 2, ["boundary layer flow", "heat"], return_tensors="pt", padding=True)
    plain = type(model.model).from_pretrained(str(folder), num_labels=1, attn_implementation="sdpa")
    plain.load_state_dict(model.model.state_dict())
    model.eval()
    plain.eval()
    assert torch.allclose(model(**inputs), plain(**inputs).logits.squeeze(-1), atol=1e-6)
    model.train()
    assert not torch.equal(model(**inputs), model(**inputs))  # dropout is on
