"""Loss heads against independent references: trec_eval, brute-force enumeration, hand-computed formulas."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from helpers import random_lists

from rerank.evaluation.measures import evaluate
from rerank.losses import LOSSES, build_loss
from rerank.losses.rank_binomial import expected_rank_discounts, rank_binomial, win_probabilities
from rerank.losses.softndcg import normal_rank_distribution

GAIN_OF = {"exp2m1": lambda y: 2**y - 1, "exp2": lambda y: 2**y, "linear": lambda y: y}


def _trec_eval(scores: torch.Tensor, labels: torch.Tensor, measure: str, gain: str = "linear") -> float:
    """trec_eval's value of ``measure`` on each list, with qrels holding the gain (trec_eval's ndcg gain is linear)."""
    run, qrels = {}, {}
    for q in range(scores.shape[0]):
        run[f"q{q}"] = {f"d{j}": float(s) for j, s in enumerate(scores[q])}
        qrels[f"q{q}"] = {f"d{j}": int(GAIN_OF[gain](int(y))) for j, y in enumerate(labels[q])}
    return evaluate(run, qrels, [measure]).mean[measure]


SHARP = [
    ("smoothi_ndcg", {"alpha": 1e4}, "nDCG"),
    ("smoothi_ndcg", {"alpha": 1e4, "k": 5}, "nDCG@5"),
    ("smoothi_ndcg", {"alpha": 1e4, "k": 5, "stop_grad": False}, "nDCG@5"),
    ("softndcg", {"sigma": 1e-4}, "nDCG"),
    ("softndcg", {"sigma": 1e-4, "k": 5}, "nDCG@5"),
    ("softndcg", {"sigma": 1e-4, "method": "normal"}, "nDCG"),
    ("approx_ndcg", {"temperature": 1e-4}, "nDCG"),
    ("neural_ndcg", {"temperature": 1e-4}, "nDCG"),
]


@pytest.mark.parametrize(("name", "kwargs", "measure"), SHARP)
def test_ndcg_losses_converge_to_trec_eval(name: str, kwargs: dict, measure: str) -> None:
    scores, labels = random_lists(6, 12, grades=4, seed=10, dtype=torch.float64)
    loss = build_loss(name, **kwargs)(scores, labels)
    assert 1.0 - loss.item() == pytest.approx(_trec_eval(scores, labels, measure, "exp2m1"), abs=1e-3)


@pytest.mark.parametrize("name", ["smoothi_ndcg", "softndcg"])
@pytest.mark.parametrize("gain", ["exp2", "linear"])
def test_gain_choices_converge_to_trec_eval(name: str, gain: str) -> None:
    scores, labels = random_lists(6, 12, grades=4, seed=11, dtype=torch.float64)
    sharp = {"alpha": 1e4} if name == "smoothi_ndcg" else {"sigma": 1e-4}
    loss = build_loss(name, gain=gain, **sharp)(scores, labels)
    assert 1.0 - loss.item() == pytest.approx(_trec_eval(scores, labels, "nDCG", gain), abs=1e-3)


@pytest.mark.parametrize(
    ("name", "kwargs", "measure"),
    [("smoothi_precision", {"k": 5}, "P@5"), ("smoothi_precision", {"k": 20}, "P@20"),
     ("smoothi_ap", {}, "AP"), ("smoothi_ap", {"k": 5}, "AP@5")],
)
def test_smoothi_precision_and_ap_converge_to_trec_eval(name: str, kwargs: dict, measure: str) -> None:
    scores, labels = random_lists(6, 12, grades=3, seed=12, dtype=torch.float64)
    loss = build_loss(name, alpha=1e4, **kwargs)(scores, labels)
    assert 1.0 - loss.item() == pytest.approx(_trec_eval(scores, labels, measure), abs=1e-3)


@pytest.mark.parametrize("length", [2, 5, 8])
def test_rank_binomial_equals_enumeration_of_contest_outcomes(length: int) -> None:
    scores = torch.randn(1, length, dtype=torch.float64, generator=torch.Generator().manual_seed(length))
    mask = torch.ones(1, length, dtype=torch.bool)
    beats = win_probabilities(scores, mask, sigma=0.7)[0]  # [i, j] = P(i beats j)
    dist = rank_binomial(beats.T.unsqueeze(0), length)[0]
    for j in range(length):
        others = [i for i in range(length) if i != j]
        expected = torch.zeros(length, dtype=torch.float64)
        for outcome in itertools.product([0, 1], repeat=length - 1):  # all 2^(N-1) win/lose outcomes
            probability = math.prod(beats[i, j].item() if won else 1 - beats[i, j].item()
                                    for i, won in zip(others, outcome))
            expected[sum(outcome)] += probability
        torch.testing.assert_close(dist[j], expected, atol=1e-12, rtol=0)


def test_rank_binomial_truncation_keeps_the_top_ranks() -> None:
    scores = torch.randn(2, 9, dtype=torch.float64)
    contests = win_probabilities(scores, torch.ones(2, 9, dtype=torch.bool), 1.0).transpose(-1, -2)
    torch.testing.assert_close(rank_binomial(contests, 4), rank_binomial(contests, 9)[..., :4])


def test_normal_approximation_matches_moments_of_the_exact_distribution() -> None:
    scores = torch.randn(1, 60, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 0.3
    mask = torch.ones(1, 60, dtype=torch.bool)
    contests = win_probabilities(scores, mask, 1.0).transpose(-1, -2)
    exact, approx = rank_binomial(contests, 60), normal_rank_distribution(contests, mask, 60)
    ranks = torch.arange(60, dtype=torch.float64)
    torch.testing.assert_close(approx @ ranks, exact @ ranks, atol=0.05, rtol=0)
    assert (approx - exact).abs().sum(dim=-1).max() < 0.05  # total variation on a list of 60


def test_lambdarank_gradient_equals_hand_computed_lambdas() -> None:
    scores = torch.tensor([[0.3, 1.2, -0.4, 0.9, 0.0]], dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([[2, 0, 1, 0, 3]])
    sigma, k = 1.5, 3
    build_loss("lambdarank", sigma=sigma, k=k)(scores, labels).backward()
    s, y = scores[0].tolist(), labels[0].tolist()
    order = sorted(range(5), key=lambda i: -s[i])
    rank = {doc: position + 1 for position, doc in enumerate(order)}

    def discount(r: int) -> float:
        return 1 / math.log2(1 + r) if r <= k else 0.0

    ideal = sum((2 ** g - 1) * discount(r + 1) for r, g in enumerate(sorted(y, reverse=True)))
    expected = [0.0] * 5
    for i, j in itertools.permutations(range(5), 2):
        if y[i] > y[j]:
            delta = abs((2 ** y[i] - 2 ** y[j]) * (discount(rank[i]) - discount(rank[j]))) / ideal
            lam = sigma * delta / (1 + math.exp(sigma * (s[i] - s[j])))
            expected[i] -= lam  # the loss gradient is minus the lambda
            expected[j] += lam
    torch.testing.assert_close(scores.grad[0], torch.tensor(expected, dtype=torch.float64))


def _pairs(y: list[int]) -> list[tuple[int, int]]:
    return [(i, j) for i, j in itertools.permutations(range(len(y)), 2) if y[i] > y[j]]


def test_hinge_and_ranknet_match_their_pair_formulas() -> None:
    scores, labels = random_lists(1, 6, seed=13, dtype=torch.float64)
    s, y = scores[0].tolist(), labels[0].tolist()
    pairs = _pairs(y)
    hinge = sum(max(0.0, 0.5 - (s[i] - s[j])) for i, j in pairs) / len(pairs)
    ranknet = sum(math.log1p(math.exp(-2.0 * (s[i] - s[j]))) for i, j in pairs) / len(pairs)
    assert build_loss("hinge", margin=0.5)(scores, labels).item() == pytest.approx(hinge)
    assert build_loss("ranknet", sigma=2.0)(scores, labels).item() == pytest.approx(ranknet)


def test_listmle_equals_plackett_luce_likelihood() -> None:
    scores = torch.tensor([[0.2, -1.0, 0.7, 0.1]], dtype=torch.float64)
    labels = torch.tensor([[1, 0, 2, 1]])
    s = scores[0].tolist()
    ideal = [2, 0, 3, 1]  # decreasing label, ties in list order
    likelihood = 1.0
    for position, doc in enumerate(ideal):
        likelihood *= math.exp(s[doc]) / sum(math.exp(s[d]) for d in ideal[position:])
    assert build_loss("listmle")(scores, labels).item() == pytest.approx(-math.log(likelihood))


def test_listmle_tails_that_underflow_take_the_exact_path() -> None:
    """Scores 100 apart: exp(s - max) underflows in float32, so the tail sums fall back to logcumsumexp."""
    s = [0.0, -100.0, 50.0, -200.0]
    labels = torch.tensor([[1, 0, 2, 1, 3]])  # the last slot is padding (and would come first if it were real)
    scores = torch.tensor([[*s, 7.0]], requires_grad=True)
    mask = torch.tensor([[True, True, True, True, False]])
    value = build_loss("listmle")(scores, labels, mask)
    value.backward()
    ideal = [2, 0, 3, 1]  # decreasing label, ties in list order
    expected = sum(math.log(sum(math.exp(s[d] - s[doc]) for d in ideal[r:])) for r, doc in enumerate(ideal))
    assert value.item() == pytest.approx(expected, rel=1e-6)
    assert torch.isfinite(scores.grad).all() and scores.grad[0, -1] == 0


def test_listnet_is_top_one_cross_entropy() -> None:
    scores, labels = random_lists(1, 5, seed=14, dtype=torch.float64)
    s, y = scores[0].tolist(), labels[0].tolist()
    p_y = [math.exp(v) / sum(math.exp(u) for u in y) for v in y]
    p_s = [math.exp(v) / sum(math.exp(u) for u in s) for v in s]
    expected = -sum(a * math.log(b) for a, b in zip(p_y, p_s))
    assert build_loss("listnet")(scores, labels).item() == pytest.approx(expected)


def test_lambdaloss_matches_ndcg_loss2pp_by_pairs() -> None:
    scores, labels = random_lists(1, 6, seed=15, dtype=torch.float64)
    s, y = scores[0].tolist(), labels[0].tolist()
    position = {doc: p + 1 for p, doc in enumerate(sorted(range(6), key=lambda i: -s[i]))}
    ideal = sum((2 ** g - 1) / math.log2(2 + r) for r, g in enumerate(sorted(y, reverse=True)))
    inv = lambda m: 1 / math.log2(1 + m)  # noqa: E731
    expected = 0.0
    for i, j in _pairs(y):
        rho = abs(inv(position[i]) - inv(position[j]))
        gap = abs(position[i] - position[j])
        delta = abs(inv(gap) - inv(gap + 1))
        weight = (rho + 10 * delta) * abs(2 ** y[i] - 2 ** y[j]) / ideal
        expected -= weight * math.log2(1 / (1 + math.exp(-(s[i] - s[j]))))
    assert build_loss("lambdaloss")(scores, labels).item() == pytest.approx(expected)


def test_pointwise_losses_match_their_formulas() -> None:
    scores, labels = random_lists(1, 5, seed=16, dtype=torch.float64)
    s, y = scores[0].tolist(), labels[0].tolist()
    bce = sum(math.log1p(math.exp(-v)) if t > 0 else math.log1p(math.exp(v)) for v, t in zip(s, y)) / 5
    mse = sum((v - t) ** 2 for v, t in zip(s, y)) / 5
    assert build_loss("pointwise_bce")(scores, labels).item() == pytest.approx(bce)
    assert build_loss("pointwise_mse")(scores, labels).item() == pytest.approx(mse)


PAIR_BASED = ["lambdarank", "lambdaloss", "hinge", "ranknet", "pointwise_bce"]
METRIC_APPROXIMATIONS = {
    "smoothi_ndcg": {"alpha": 1e4},
    "smoothi_precision": {"alpha": 1e4, "k": 3},
    "smoothi_ap": {"alpha": 1e4},
    "softndcg": {"sigma": 0.01},
    "approx_ndcg": {"temperature": 0.01},
    "neural_ndcg": {"temperature": 0.01},
}


@pytest.mark.parametrize("name", PAIR_BASED)
def test_pairwise_losses_never_push_a_top_grade_candidate_down(name: str) -> None:
    for seed in range(50):
        scores, labels = random_lists(1, 8, grades=4, seed=seed, dtype=torch.float64)
        scores.requires_grad_()
        (grad,) = torch.autograd.grad(build_loss(name)(scores, labels), scores)
        assert (grad[labels == labels.max()] <= 1e-12).all()


@pytest.mark.parametrize("name", sorted(METRIC_APPROXIMATIONS))
def test_raising_a_top_grade_candidate_never_raises_a_metric_loss(name: str) -> None:
    """Move a top-grade candidate past the others one by one: the loss never rises.

    Evaluated midway between the other candidates' scores, where the sharp approximation is tight; between
    those points the smooth approximations are not monotone in general (see docs/losses.md).
    """
    loss = build_loss(name, **METRIC_APPROXIMATIONS[name])
    for seed in range(20):
        scores, labels = random_lists(1, 7, grades=4, seed=seed, dtype=torch.float64)
        top = int(labels[0].argmax())
        others = sorted(float(v) for i, v in enumerate(scores[0]) if i != top and v > scores[0, top])
        stops = [(a + b) / 2 for a, b in itertools.pairwise(others)] + ([others[-1] + 1.0] if others else [])
        previous = loss(scores, labels).item()
        for stop in stops:
            raised = scores.clone()
            raised[0, top] = stop
            current = loss(raised, labels).item()
            assert current <= previous + 1e-6
            previous = current


def test_registry_names_and_errors() -> None:
    assert set(LOSSES) == {
        "smoothi_ndcg", "smoothi_precision", "smoothi_ap", "softndcg", "lambdarank", "hinge", "ranknet",
        "listnet", "listmle", "approx_ndcg", "neural_ndcg", "lambdaloss", "pointwise_bce", "pointwise_mse",
        "distill_listnet", "distill_ranknet", "margin_mse", "click_softmax", "click_bce", "dla",
    }
    with pytest.raises(ValueError, match="unknown loss 'smoothy'.*smoothi_ndcg"):
        build_loss("smoothy")
    with pytest.raises(ValueError, match="no parameter beta.*alpha, delta"):
        build_loss("smoothi_ndcg", beta=1.0)
    for delta in (0.0, 0.5, -0.1):
        with pytest.raises(ValueError, match=r"delta must be in \(0, 0.5\)"):
            build_loss("smoothi_ndcg", delta=delta)
    with pytest.raises(ValueError, match="gain must be one of"):
        build_loss("softndcg", gain="cubic")
    with pytest.raises(ValueError, match="k must be a positive integer"):
        build_loss("lambdarank", k=0)


def test_bad_shapes_and_labels_are_rejected() -> None:
    loss = build_loss("listnet")
    with pytest.raises(ValueError, match="labels shape"):
        loss(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="labels must be >= 0"):
        loss(torch.zeros(1, 3), torch.tensor([[1, -1, 0]]))
    with pytest.raises(ValueError, match="labels must be finite"):
        build_loss("distill_listnet")(torch.zeros(1, 3), torch.tensor([[0.3, float("nan"), 0.1]]))


def test_a_loss_class_is_named_by_its_import_path() -> None:
    loss = build_loss({"class_path": "rerank.losses.RankNet", "init_args": {"sigma": 2.0}})
    assert type(loss).__name__ == "RankNet" and loss.sigma == 2.0
    assert build_loss({"class_path": "rerank.losses.hinge.PairwiseHinge"}, margin=0.5).margin == 0.5
    with pytest.raises(ValueError, match="'torch.nn.MSELoss' is not a rerank.losses.RankingLoss subclass"):
        build_loss({"class_path": "torch.nn.MSELoss"})
    with pytest.raises(ValueError, match="'nope.Loss' cannot be imported"):
        build_loss({"class_path": "nope.Loss"})
    with pytest.raises(ValueError, match="loss 'rerank.losses.RankNet' has no parameter alpha"):
        build_loss({"class_path": "rerank.losses.RankNet", "init_args": {"alpha": 1}})


TEACHER = [[0.61, -0.35, 0.42, 0.20, 0.42]]


def test_distill_listnet_is_cross_entropy_to_the_tempered_teacher_distribution() -> None:
    scores = torch.tensor([[0.5, -1.0, 2.0, 0.1, 0.3]], dtype=torch.float64)
    temperature = 0.05
    targets = [math.exp(t / temperature) for t in TEACHER[0]]
    targets = [value / sum(targets) for value in targets]
    norm = math.log(sum(math.exp(s) for s in scores[0].tolist()))
    expected = -sum(p * (s - norm) for p, s in zip(targets, scores[0].tolist()))
    value = build_loss("distill_listnet", temperature=temperature)(scores, torch.tensor(TEACHER, dtype=torch.float64))
    assert value.item() == pytest.approx(expected, rel=1e-9)


def test_click_softmax_weighs_each_candidate_s_log_probability_by_its_clicks() -> None:
    scores = [[0.5, -1.0, 2.0, 0.1, 9.0], [0.2, 0.1, -0.3, 0.0, 0.0]]
    weights = [[4.0, 0.0, 1.0, 0.5, 7.0], [0.0, 0.0, 0.0, 0.0, 0.0]]  # the second list has no click
    mask = torch.tensor([[True, True, True, True, False], [True] * 5])  # the first list's last slot is padding
    norm = math.log(sum(math.exp(s) for s in scores[0][:4]))
    expected = -sum(w * (s - norm) for w, s in zip(weights[0][:4], scores[0][:4]))
    tensor = torch.tensor(scores, dtype=torch.float64, requires_grad=True)
    value = build_loss("click_softmax")(tensor, torch.tensor(weights, dtype=torch.float64), mask)
    assert value.item() == pytest.approx(expected, rel=1e-9)  # the mean over the one list with clicks
    value.backward()
    assert tensor.grad[0, 4] == 0 and not tensor.grad[1].any()
    with pytest.raises(ValueError, match="click weights must be >= 0"):
        build_loss("click_softmax")(torch.zeros(1, 3), torch.tensor([[1.0, -1.0, 0.0]]))


def test_click_bce_is_the_log_loss_against_each_click_target() -> None:
    scores = [[0.5, -1.0, 2.0, 0.1], [0.3, 0.0, 0.0, 0.0]]
    targets = [[1.5, 0.0, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0]]  # an IPS target above 1; a list without clicks
    sigmoid = [1 / (1 + math.exp(-s)) for s in scores[0]]
    expected = -sum(w * math.log(p) + (1 - w) * math.log(1 - p) for w, p in zip(targets[0], sigmoid)) / 4
    tensor = torch.tensor(scores, dtype=torch.float64, requires_grad=True)
    value = build_loss("click_bce")(tensor, torch.tensor(targets, dtype=torch.float64))
    assert value.item() == pytest.approx(expected, rel=1e-9)
    value.backward()  # d/ds_j = (sigma(s_j) - w_j) / n: bounded however large the target
    assert tensor.grad[0].tolist() == pytest.approx([(p - w) / 4 for p, w in zip(sigmoid, targets[0])], rel=1e-9)
    assert not tensor.grad[1].any()


def test_dla_is_ips_with_its_propensities_plus_their_own_inverse_relevance_loss() -> None:
    head = build_loss("dla", ranks=5, clip=0.05).double()
    with torch.no_grad():
        head.logits.copy_(torch.tensor([0.0, -1.0, -1.5, -2.0, -4.0]))  # theta_k / theta_1 = exp(phi_k - phi_1)
    scores = torch.tensor([[1.0, 0.2, 0.5, -0.3]], dtype=torch.float64, requires_grad=True)
    clicks = torch.tensor([[0.3, 0.1, 0.0, 0.02]], dtype=torch.float64)
    ranks = torch.tensor([[2, 3, 4, 5]])  # a list drawn from a page: rank 1 is not in it
    value = head(scores, clicks, ranks=ranks)
    phi = [-1.0, -1.5, -2.0, -4.0]
    ipw = [min(math.exp(0.0 - p), 20.0) for p in phi]  # rank 5: e^4 = 54.6, clipped at 1 / 0.05
    log_r = torch.log_softmax(scores.detach(), -1)[0].tolist()
    irw = [min(math.exp(log_r[0] - lr), 20.0) for lr in log_r]  # relative to the list's first-ranked document
    log_theta = torch.log_softmax(torch.tensor(phi, dtype=torch.float64), -1).tolist()
    c = clicks[0].tolist()
    expected = -sum(c[j] * (ipw[j] * log_r[j] + irw[j] * log_theta[j]) for j in range(4))
    assert value.item() == pytest.approx(expected, rel=1e-9)
    value.backward()  # the ranker's gradient is that of the click softmax over the IPS targets c_j * ipw_j
    reference = scores.detach().clone().requires_grad_()
    build_loss("click_softmax")(reference, clicks * torch.tensor([ipw], dtype=torch.float64)).backward()
    torch.testing.assert_close(scores.grad, reference.grad)
    # beside a list of another source in the batch (a teacher's: no clicks, ranks 0), the same loss and gradient
    mixed = torch.cat([scores.detach(), torch.tensor([[0.4, -2.0, 1.0, 0.0]], dtype=torch.float64)]).requires_grad_()
    value_mixed = head(mixed, torch.cat([clicks, torch.zeros_like(clicks)]), ranks=torch.cat([ranks, 0 * ranks]))
    assert value_mixed.item() == pytest.approx(expected, rel=1e-9)
    value_mixed.backward()
    torch.testing.assert_close(mixed.grad, torch.cat([reference.grad, torch.zeros_like(reference.grad)]))
    with pytest.raises(ValueError, match="shown at rank 6: the dla head models ranks 1 to 5"):
        head(scores, clicks, ranks=torch.tensor([[2, 3, 4, 6]]))
    with pytest.raises(ValueError, match="shown at rank 0: the dla head models ranks 1 to 5"):
        head(scores, clicks, ranks=torch.tensor([[0, 3, 4, 5]]))  # a list from the log needs every rank
    with pytest.raises(ValueError, match="needs the rank each document was shown at"):
        head(scores, clicks)


def test_dla_learns_the_position_bias_of_position_based_clicks() -> None:
    """With the relevance known (the ranker's scores fixed at log r), the propensity model trained on pages of
    expected clicks ``theta_k * r`` (theta_k = (1/k)^2) recovers theta within 2 %."""
    generator = torch.Generator().manual_seed(0)
    relevance = torch.rand(64, 10, generator=generator) * 0.9 + 0.05  # 64 pages, documents shown at ranks 1..10
    theta = 1 / torch.arange(1, 11, dtype=torch.float32) ** 2
    clicks, ranks = theta * relevance, torch.arange(1, 11).expand(64, 10)
    head = build_loss("dla", ranks=10)
    optimizer = torch.optim.Adam(head.parameters(), lr=head.lr)
    for _ in range(500):
        optimizer.zero_grad()
        head(relevance.log(), clicks, ranks=ranks).backward()
        optimizer.step()
    assert head.propensities() == pytest.approx(theta.tolist(), rel=0.02)


def test_distill_ranknet_follows_the_teachers_order_and_margin_mse_its_margins() -> None:
    scores = [0.5, -1.0, 2.0, 0.1, 0.3]
    teacher = torch.tensor(TEACHER, dtype=torch.float64)
    pairs = [(i, j) for i in range(5) for j in range(5) if TEACHER[0][i] > TEACHER[0][j]]
    assert len(pairs) == 9  # the tie (0.42, 0.42) is not a pair
    ranknet = sum(math.log1p(math.exp(-(scores[i] - scores[j]))) for i, j in pairs) / len(pairs)
    margins = sum(((scores[i] - scores[j]) - 3.0 * (TEACHER[0][i] - TEACHER[0][j])) ** 2
                  for i, j in pairs) / len(pairs)
    tensor = torch.tensor([scores], dtype=torch.float64)
    assert build_loss("distill_ranknet")(tensor, teacher).item() == pytest.approx(ranknet, rel=1e-9)
    assert build_loss("margin_mse", scale=3.0)(tensor, teacher).item() == pytest.approx(margins, rel=1e-9)


@pytest.mark.parametrize("ranks", [9, 4])
def test_compiled_expected_discounts_match_the_tensor_recursion(ranks: int) -> None:
    """The CPU kernels (values and gradients) against the plain tensor recursion under autograd."""
    generator = torch.Generator().manual_seed(ranks)
    scores = torch.randn(3, 9, dtype=torch.float64, generator=generator)
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[1, 6:] = False
    active = mask & (torch.rand(3, 9, generator=generator) > 0.3)
    discounts = torch.rand(3, ranks, dtype=torch.float64, generator=generator)
    upstream = torch.randn(3, 9, dtype=torch.float64, generator=generator)
    results = []
    for compiled in (True, False):
        leaf = scores.clone().requires_grad_()
        if compiled:
            expected = expected_rank_discounts(leaf, mask, active, 0.8, discounts)
        else:
            dist = rank_binomial(win_probabilities(leaf, mask, 0.8).transpose(-1, -2), ranks)
            expected = torch.where(active, torch.einsum("qmr,qr->qm", dist, discounts), 0.0)
        (expected * upstream).sum().backward()
        results.append((expected.detach(), leaf.grad))
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(results[0][1], results[1][1], atol=1e-12, rtol=1e-10)
