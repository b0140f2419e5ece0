"""The rules every loss head keeps (rerank.losses.base), checked for every registered loss."""

from __future__ import annotations

import pytest
import torch
from helpers import random_lists

from rerank.losses import LOSSES, build_loss

NAMES = sorted(LOSSES)


def _apply(name: str, scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None = None,
           **kwargs: object) -> torch.Tensor:
    """``build_loss(name)(scores, labels, mask)``; a head that needs ranks (dla) gets the real slots' order, 1, 2..."""
    if not build_loss(name).needs_ranks:
        return build_loss(name, **kwargs)(scores, labels, mask)
    ranks = (torch.ones_like(labels, dtype=torch.bool) if mask is None else mask).long().cumsum(-1)
    return build_loss(name, ranks=max(int(ranks.max()), 2), **kwargs)(scores, labels, mask, ranks=ranks)


def _loss_and_grad(name: str, scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None = None):
    scores = scores.detach().clone().requires_grad_()
    value = _apply(name, scores, labels, mask)
    value.backward()
    return value.detach(), scores.grad


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("garbage_score", "garbage_label"), [(123.0, 4), (float("inf"), -1), (float("nan"), 0)])
def test_padding_changes_neither_loss_nor_gradients(name: str, garbage_score: float, garbage_label: int) -> None:
    scores, labels = random_lists(3, 7, seed=1, dtype=torch.float64)
    alone, alone_grad = _loss_and_grad(name, scores, labels)
    # interleave padded slots holding garbage scores (finite, or not: another code path) and labels
    padded_scores = torch.full((3, 11), garbage_score, dtype=torch.float64)
    padded_labels = torch.full((3, 11), garbage_label)
    mask = torch.zeros(3, 11, dtype=torch.bool)
    real = [0, 2, 3, 5, 6, 8, 10]
    padded_scores[:, real], padded_labels[:, real], mask[:, real] = scores, labels, True
    padded, padded_grad = _loss_and_grad(name, padded_scores, padded_labels, mask)
    assert padded.item() == pytest.approx(alone.item(), abs=1e-6)
    torch.testing.assert_close(padded_grad[:, real], alone_grad, atol=1e-6, rtol=1e-6)
    assert torch.all(padded_grad[~mask] == 0)


@pytest.mark.parametrize("name", NAMES)
def test_queries_without_contrast_contribute_nothing(name: str) -> None:
    scores, labels = random_lists(2, 6, seed=2)
    flat = torch.zeros(3, 6, dtype=labels.dtype)
    flat[1] = 2  # every candidate equally relevant: no pair to order
    both_scores = torch.cat([scores, torch.randn(3, 6)])
    both_labels = torch.cat([labels, flat])
    mixed, _ = _loss_and_grad(name, both_scores, both_labels)
    alone, _ = _loss_and_grad(name, scores, labels)
    assert mixed.item() == pytest.approx(alone.item(), rel=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_batch_with_no_contributing_query_gives_connected_zero(name: str) -> None:
    scores = torch.randn(2, 5, requires_grad=True)
    value = _apply(name, scores, torch.zeros(2, 5, dtype=torch.long))
    assert value.item() == 0.0 and value.requires_grad
    value.backward()
    assert torch.all(scores.grad == 0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_scores_are_computed_in_float32(name: str, dtype: torch.dtype) -> None:
    scores, labels = random_lists(4, 9, seed=3)
    low = scores.to(dtype).requires_grad_()
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        value = _apply(name, low, labels)
    assert value.dtype == torch.float32
    reference = _apply(name, low.detach().float(), labels)
    assert value.item() == pytest.approx(reference.item(), rel=1e-5, abs=1e-6)
    value.backward()
    assert low.grad.dtype == dtype and torch.isfinite(low.grad.float()).all()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("queries", "length", "scale"), [(4, 10, 1e4), (2, 1000, 1.0), (2, 1000, 1e4)])
def test_large_scores_and_long_lists_stay_finite(name: str, queries: int, length: int, scale: float) -> None:
    scores, labels = random_lists(queries, length, grades=5, seed=4)
    mask = torch.rand(queries, length, generator=torch.Generator().manual_seed(0)) > 0.1
    mask[:, :2] = True
    value, grad = _loss_and_grad(name, scores * scale, labels, mask)
    assert torch.isfinite(value) and torch.isfinite(grad).all()


@pytest.mark.parametrize("name", NAMES)
def test_tied_scores_are_deterministic(name: str) -> None:
    labels = torch.tensor([[2, 0, 1, 0, 1, 2]])
    scores = torch.tensor([[0.5, 0.5, 0.5, -1.0, -1.0, 0.5]])
    first, first_grad = _loss_and_grad(name, scores, labels)
    for _ in range(3):
        again, again_grad = _loss_and_grad(name, scores, labels)
        assert torch.equal(again, first) and torch.equal(again_grad, first_grad)


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_float64(name: str) -> None:
    scores, labels = random_lists(2, 6, seed=5, dtype=torch.float64)
    scores = (scores * 3).requires_grad_()  # well separated: piecewise losses are smooth around this point
    mask = torch.ones_like(labels, dtype=torch.bool)
    mask[1, -1] = False
    if name == "dla":
        pytest.skip("dla's relevance weights are a stop-gradient by design (Ai et al., SIGIR 2018, Eq. 9); "
                    "test_loss_references checks its gradient against the IPS softmax it reduces to")
    kwargs = {"stop_grad": False} if name.startswith("smoothi") else {}  # Eq. 9's stop-gradient is not a gradient
    assert torch.autograd.gradcheck(lambda s: _apply(name, s, labels, mask, **kwargs), (scores,), eps=1e-6,
                                    atol=1e-5)


def test_mean_is_over_contributing_queries() -> None:
    scores, labels = random_lists(3, 5, seed=6)
    loss = build_loss("ranknet")
    per_query = [loss(scores[i : i + 1], labels[i : i + 1]) for i in range(3)]
    assert loss(scores, labels).item() == pytest.approx(sum(v.item() for v in per_query) / 3, rel=1e-6)
