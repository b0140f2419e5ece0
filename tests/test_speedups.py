"""rerank.model.speedups: cheap CPU dropout masks (against the Bernoulli distribution and PyTorch's attention), the
[CLS]-only last layer, and the switch that applies, checks and undoes them."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import tiny_bert
from transformers import AutoModelForSequenceClassification

from rerank.model import speedups
from rerank.model.cross_encoder import CrossEncoderModel
from rerank.model.speedups import FastDropout, dropout_mask, fast_dropout
from rerank.model.speedups import attention_function as attention
from rerank.training.lightning_module import dropout_seed

REPO = Path(__file__).resolve().parents[1]
needs_supported_transformers = pytest.mark.skipif(
    not speedups._transformers_supported(),
    reason=f"the speed-ups need transformers >= {'.'.join(map(str, speedups.MIN_TRANSFORMERS))} (older: stock modules)")


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


def _stock(folder: Path) -> torch.nn.Module:
    return AutoModelForSequenceClassification.from_pretrained(str(folder), num_labels=1, attn_implementation="sdpa")


def _inputs(model: CrossEncoderModel) -> dict[str, torch.Tensor]:
    return dict(model.tokenizer(["wind tunnel", "heat"], ["boundary layer flow model", "heat flux laws"],
                                return_tensors="pt", padding=True))


def test_nothing_is_registered_at_import() -> None:
    code = ("import rerank, rerank.model.speedups, rerank.training.lightning_module, rerank.cli.fit\n"
            "from transformers import AttentionInterface\n"
            "assert 'rerank_sdpa' not in AttentionInterface._global_mapping, 'registered at import'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@needs_supported_transformers
def test_enabled_speedups_score_like_the_stock_model_and_disable_restores_it(tmp_path: Path) -> None:
    folder = tiny_bert(tmp_path / "bert", dropout=0.1)
    model = CrossEncoderModel.from_pretrained(str(folder))
    assert speedups.enable(model.model) == ["cls_only_last_layer", "cheap_dropout"]
    assert model.model.config._attn_implementation == "rerank_sdpa"
    dropouts = [m for m in model.model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts and all(isinstance(m, FastDropout) for m in dropouts)
    stock = _stock(folder)
    stock.load_state_dict(model.model.state_dict())
    model.eval()
    stock.eval()
    inputs = _inputs(model)
    expected = stock(**inputs).logits.squeeze(-1)
    assert torch.allclose(model(**inputs), expected, atol=1e-6)
    model.train()
    assert not torch.equal(model(**inputs), model(**inputs))  # dropout is on
    speedups.disable(model.model)
    assert model.model.config._attn_implementation == "sdpa" and not any(
        isinstance(m, FastDropout) for m in model.model.modules())
    assert "forward" not in vars(model.model.base_model.encoder.layer[-1])
    model.eval()
    speedups.enable(model.model)
    speedups.disable(model.model)  # in eval mode: the restored modules keep it
    assert torch.allclose(model(**inputs), expected, atol=1e-6)


@needs_supported_transformers
def test_training_gradients_with_dropout_0_equal_the_stock_models(tmp_path: Path) -> None:
    folder = tiny_bert(tmp_path / "bert", dropout=0.0)
    model = CrossEncoderModel.from_pretrained(str(folder))
    speedups.enable(model.model)
    stock = _stock(folder)
    stock.load_state_dict(model.model.state_dict())
    model.train()
    stock.train()
    inputs = _inputs(model)
    model(**inputs).pow(2).sum().backward()
    stock(**inputs).logits.squeeze(-1).pow(2).sum().backward()
    ours = dict(model.model.named_parameters())
    compared = 0
    for name, parameter in stock.named_parameters():
        if parameter.grad is None:  # unused by both (none in BERT's sequence classification)
            assert ours[name].grad is None
            continue
        torch.testing.assert_close(ours[name].grad, parameter.grad, atol=1e-5, rtol=1e-4)
        compared += 1
    assert compared == len(list(stock.parameters()))


def test_a_mismatch_keeps_the_stock_modules_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tiny_bert(tmp_path / "bert")
    if speedups._transformers_supported():
        model = CrossEncoderModel.from_pretrained(str(folder))
        del model.model.base_model.encoder.layer[-1].attention.self.scaling  # a layer unlike the one expected
        with caplog.at_level(logging.WARNING):
            assert speedups.enable(model.model) == ["cheap_dropout"]
        assert "cls_only_last_layer off" in caplog.text
        assert "forward" not in vars(model.model.base_model.encoder.layer[-1])
        monkeypatch.setattr(speedups, "MIN_TRANSFORMERS", (999, 0))  # below: an older transformers
    fresh = CrossEncoderModel.from_pretrained(str(folder))
    with caplog.at_level(logging.WARNING):
        assert speedups.enable(fresh.model) == []
    assert "speed-ups off: transformers" in caplog.text
    assert fresh.model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("enabled", [False, True])
def test_gradient_checkpointing_recomputes_the_layers_in_the_backward_pass(tmp_path: Path, enabled: bool) -> None:
    folder = tiny_bert(tmp_path / "bert", with_head=True, dropout=0.0)
    calls = []
    for checkpointing in (False, True):
        model = CrossEncoderModel.from_pretrained(str(folder), gradient_checkpointing=checkpointing)
        if enabled:
            speedups.enable(model.model)
        model.train()
        counted: list[int] = []
        layers = model.model.base_model.encoder.layer
        for layer in layers:  # transformers checkpoints a layer's forward: hooks inside it fire on recomputation
            layer.intermediate.register_forward_hook(lambda *_, seen=counted: seen.append(1))
        model(**_inputs(model)).sum().backward()
        calls.append(len(counted))
    # recent transformers (5.23) checkpoint a layer's forward, which the [CLS]-only last layer replaces: that layer
    # (a few rows) is then kept rather than recomputed; older ones (5.0, 4.57) checkpoint __call__ and recompute it
    assert calls[0] == len(layers) and calls[1] in (2 * len(layers) - enabled, 2 * len(layers))


def test_each_process_draws_its_own_dropout_masks_reproducibly() -> None:
    seeds = {rank: dropout_seed(42, 1, 7, rank) for rank in range(4)}
    assert len(set(seeds.values())) == 4  # DDP ranks: different masks for the same batch index
    assert seeds == {rank: dropout_seed(42, 1, 7, rank) for rank in range(4)}  # a resumed run: the same ones
    code = "from rerank.training.lightning_module import dropout_seed; print(dropout_seed(42, 1, 7, 1))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert int(other.stdout) == seeds[1]  # the same in another process (no hash randomization for ints)
