"""The module's loss heads (rerank.training.loss_heads): each head's term is its loss on the batch's lists against
the loss computed directly, a head applies only to the batches with its targets, and the total is the weighted sum."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import tiny_bert

from rerank.losses import build_loss
from rerank.training.batches import TrainingBatch
from rerank.training.lightning_module import RerankModule

LABELS = torch.tensor([[2, 0, 0, 1], [1, 0, 0, 2]])
TEACHER = torch.tensor([[0.62, 0.31, 0.20, 0.45], [0.50, 0.22, 0.18, 0.66]])
CLICKS = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])


def _batch(module: RerankModule, **targets: torch.Tensor) -> TrainingBatch:
    queries = ["wind tunnel", "heat flux"]
    documents = [["wind tunnel model", "heat flux", "aircraft", "similarity laws"],
                 ["heat flux laws", "wind", "query document", "heat flux to a model"]]
    inputs = module.model.pair_tokenizer()([q for q, docs in zip(queries, documents) for _ in docs],
                                           [doc for docs in documents for doc in docs])
    return TrainingBatch(inputs=inputs, labels=LABELS, mask=torch.ones(2, 4, dtype=torch.bool),
                         slots=torch.arange(8), **targets)


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory) -> RerankModule:
    torch.manual_seed(0)
    model = RerankModule(str(tiny_bert(tmp_path_factory.mktemp("bert"), dropout=0.0)), loss="lambdarank",
                         teacher_loss="distill_listnet", teacher_loss_args={"temperature": 0.5}, teacher_weight=0.3,
                         click_loss="click_softmax")
    return model.eval()


def test_each_head_is_its_loss_on_the_lists_and_the_total_their_weighted_sum(module: RerankModule) -> None:
    batch = _batch(module, teacher=TEACHER, clicks=CLICKS)
    with torch.no_grad():
        losses = module.list_losses(batch)
        lists = module(batch).view(2, 4)
        expected = {"qrels": build_loss("lambdarank")(lists, LABELS, batch.mask),
                    "teacher": build_loss("distill_listnet", temperature=0.5)(lists, TEACHER, batch.mask),
                    "clicks": build_loss("click_softmax")(lists, CLICKS, batch.mask)}
    assert set(losses) == {"qrels", "teacher", "clicks", "loss"}
    for targets, value in expected.items():
        assert value > 0 and torch.allclose(losses[targets], value, atol=1e-6), targets
    total = expected["qrels"] + 0.3 * expected["teacher"] + expected["clicks"]
    assert torch.allclose(losses["loss"], total, atol=1e-6)


def test_a_batch_without_teacher_scores_or_clicks_is_learnt_from_its_labels_alone(module: RerankModule) -> None:
    batch = _batch(module)
    with torch.no_grad():
        losses = module.list_losses(batch)
    assert set(losses) == {"qrels", "loss"} and torch.equal(losses["loss"], losses["qrels"])


def test_each_head_says_its_option_and_the_configured_loss(module: RerankModule) -> None:
    assert [(head.targets, head.option, head.name, head.weight) for head in module.heads.values()] == [
        ("qrels", "model.loss", "lambdarank", 1.0), ("teacher", "model.teacher_loss", "distill_listnet", 0.3),
        ("clicks", "model.click_loss", "click_softmax", 1.0)]


def test_a_graded_head_in_place_of_the_teachers_is_refused_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="model.teacher_loss 'listnet' takes graded labels; use a distillation"):
        RerankModule(str(tiny_bert(tmp_path / "bert")), teacher_loss="listnet")
