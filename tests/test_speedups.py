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


def padded_batch(tokens: int = 15) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded rows of 5 different lengths (the first of 2 tokens, the longest of 12), with segment ids."""
    generator = torch.Generator().manual_seed(3)
    lengths = torch.tensor([2, 12, 7, 3, 9])
    mask = (torch.arange(12) < lengths[:, None]).long()
    ids = torch.randint(5, tokens, (5, 12), generator=generator) * mask
    types = ((torch.arange(12) >= lengths[:, None] // 2).long()) * mask
    return ids, mask, types


@needs_supported_transformers
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_unpadded_rows_give_the_padded_models_scores_and_gradients(tmp_path: Path, mode: str) -> None:
    """The unpadded path (its CPU equivalent of the GPU's variable-length attention) against the stock padded
    model: the same logits and the same gradient of every parameter, in evaluation and in training (hidden
    dropout 0.1 on, the masks drawn alike from the same seed; attention dropout 0, which it needs)."""
    folder = tiny_bert(tmp_path / "bert", with_head=True, dropout=0.1)
    models = []
    for unpadded in (False, True):
        model = CrossEncoderModel.from_pretrained(str(folder), encoder_dropout=None).model
        model.config.attention_probs_dropout_prob = 0.0
        for layer in model.bert.encoder.layer:
            layer.attention.self.dropout.p = 0.0
        if unpadded:
            assert speedups.enable(model, ["unpadded"]) == ["unpadded"]
        models.append(model.train(mode == "train"))
    ids, mask, types = padded_batch()
    logits, grads = [], []
    for model in models:
        torch.manual_seed(0)
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        (out * torch.arange(1, 6)[:, None]).sum().backward()
        logits.append(out.detach())
        grads.append({name: parameter.grad for name, parameter in model.named_parameters()
                      if parameter.grad is not None})
    if mode == "eval":
        torch.testing.assert_close(logits[1], logits[0], atol=1e-5, rtol=0)
        assert set(grads[1]) == set(grads[0])
        for name, grad in grads[0].items():
            torch.testing.assert_close(grads[1][name], grad, atol=1e-5, rtol=1e-4, msg=name)
    else:  # dropout draws masks over [T, H] (unpadded) rather than [B, L, H]: the same law, other draws
        assert logits[1].shape == logits[0].shape and torch.isfinite(logits[1]).all()
        assert all(torch.isfinite(grad).all() for grad in grads[1].values())
    speedups.disable(models[1])
    assert "forward" not in vars(models[1])


@needs_supported_transformers
def test_unpadded_is_refused_where_it_would_change_the_model(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from rerank.model.unpadded import pack

    model = CrossEncoderModel.from_pretrained(str(tiny_bert(tmp_path / "bert", with_head=True, dropout=0.1))).model
    with caplog.at_level(logging.WARNING):
        assert speedups.enable(model, ["unpadded"]) == []
    assert "speed-up unpadded off: its attention dropout is 0.1" in caplog.text
    with pytest.raises(ValueError, match="padded on the right"):
        pack(torch.tensor([[0, 1, 1]]))
    with pytest.raises(ValueError, match="model.speedups: unknown 'flash'"):
        speedups.resolve(["flash"])
    assert speedups.resolve("auto") == speedups.AUTO and speedups.resolve("off") == ()
    assert speedups.resolve(["unpadded", "cls_only_last_layer"]) == ("cls_only_last_layer", "unpadded")


@needs_supported_transformers
def test_compiled_blocks_compute_what_the_stock_ones_do(tmp_path: Path) -> None:
    folder = tiny_bert(tmp_path / "bert", with_head=True, dropout=0.0)
    stock, compiled = (CrossEncoderModel.from_pretrained(str(folder)).model.eval() for _ in range(2))
    assert speedups.enable(compiled, ["compiled"]) == ["compiled"]
    assert len(speedups.position_wise(compiled)) == 3 * 2  # three blocks in each of the 2 layers
    ids, mask, types = padded_batch()
    with torch.no_grad():
        for width in (12, 9):  # a second length: the dynamic shapes serve it
            rows = {"input_ids": ids[:, :width], "attention_mask": mask[:, :width], "token_type_ids": types[:, :width]}
            expected, got = stock(**rows).logits, compiled(**rows).logits
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    speedups.disable(compiled)
    assert all(block._compiled_call_impl is None for block in speedups.position_wise(compiled))


def linear_problem(dtype: torch.dtype) -> tuple[torch.nn.Linear, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 1).to(dtype)
    return layer, torch.randn(64, 16), torch.randn(64, 1)


def test_fused_adamw_takes_the_steps_of_adamw() -> None:
    from rerank.training.optimizer import adamw

    layers = []
    for speedups_ in ([], ["fused_adamw"]):
        layer, x, y = linear_problem(torch.float32)
        optimizer = adamw([{"params": list(layer.parameters()), "lr": 0.01, "weight_decay": 0.01}], speedups_)
        assert optimizer.defaults["fused"] is (True if speedups_ else None)
        for _ in range(5):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(layer(x), y).backward()
            optimizer.step()
        layers.append(layer)
    for plain, fused in zip(layers[0].parameters(), layers[1].parameters()):
        torch.testing.assert_close(fused, plain, atol=1e-6, rtol=0)


@pytest.mark.parametrize(("requested", "device", "expected"), [
    ("auto", "gpu", ("cls_only_last_layer", "cheap_dropout", "fused_adamw")),  # measured faster there: part 7
    ("auto", "cpu", ("cls_only_last_layer", "cheap_dropout")),
    (["cls_only_last_layer"], "gpu", ("cls_only_last_layer",)),  # a list is taken as written
    ("off", "gpu", ()),
])
def test_auto_fuses_adamw_on_a_gpu_only(requested: object, device: str, expected: tuple[str, ...]) -> None:
    assert speedups.for_accelerator(requested, device) == expected


def test_bf16_weights_follow_float32_masters_that_follow_adamw() -> None:
    """bfloat16 weights, updated through float32 masters: the masters take AdamW's float32 steps on the gradients
    of the bfloat16 model (within bfloat16's rounding of those gradients), and the weights are the masters, rounded."""
    from rerank.training.optimizer import MasterWeightsAdamW, adamw

    reference, x, y = linear_problem(torch.float32)
    half, _, _ = linear_problem(torch.bfloat16)
    plain = adamw([{"params": list(reference.parameters()), "lr": 0.01}], [])
    mastered = adamw([{"params": list(half.parameters()), "lr": 0.01}], ["bf16_weights"])
    assert isinstance(mastered, MasterWeightsAdamW)
    for _ in range(20):
        for optimizer, layer in ((plain, reference), (mastered, half)):
            def closure(layer: torch.nn.Module = layer, optimizer: torch.optim.Optimizer = optimizer) -> torch.Tensor:
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(layer(x.to(layer.weight.dtype)).float(), y)
                loss.backward()
                return loss
            optimizer.step(closure)
    masters = mastered.param_groups[0]["params"]
    assert all(master.dtype == torch.float32 for master in masters)
    assert all(parameter.dtype == torch.bfloat16 for parameter in half.parameters())
    for master, parameter in zip(masters, half.parameters()):
        assert torch.equal(parameter, master.to(torch.bfloat16))  # cast down once a step
    for master, expected in zip(masters, reference.parameters()):
        torch.testing.assert_close(master, expected.detach(), atol=0.03, rtol=0.03)  # bf16 gradients
    assert not torch.equal(masters[0], masters[0].to(torch.bfloat16).float())  # the masters keep float32 detail


@needs_supported_transformers
def test_the_levers_together_train_through_lightning(tmp_path: Path) -> None:
    from helpers import cranfield_workdir
    from test_training import data_module, rerank_module, trainer

    folder = cranfield_workdir(tmp_path)
    data = data_module(folder, tmp_path / "fit")
    levers = ["cls_only_last_layer", "unpadded", "fused_adamw", "bf16_weights"]
    module = rerank_module(data, loss="listnet", encoder_dropout=0.0, speedups=levers)
    assert module.speedups == levers
    losses: list[float] = []
    module.training_step = lambda batch, index, step=module.training_step: losses.append(
        float(loss := step(batch, index))) or loss
    trainer(tmp_path, max_steps=3, precision="bf16-mixed").fit(module, datamodule=data)
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert {parameter.dtype for parameter in module.model.parameters()} == {torch.bfloat16}
