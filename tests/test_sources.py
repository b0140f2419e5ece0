"""Training sources: teacher scores from runs and bi-encoders, pseudo-queries, mixing weights, the judgment-free
pre-training stage, the example configs, and the errors of bad sources."""

from __future__ import annotations

import dataclasses
import json
import logging
import runpy
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from helpers import CRANFIELD, MINILM_VOCAB, REPO, cranfield_workdir, script_path, tiny_bert, tiny_bi_encoder
from safetensors.torch import load_file

from rerank.cli import fit
from rerank.config.optimizer import OptimizerSettings
from rerank.config.pretrain import PretrainConfig
from rerank.config.source import SourceConfig, as_source_config
from rerank.config.teacher import TeacherConfig
from rerank.data.candidates import CandidateLists, read_candidates
from rerank.data.collection import Collection
from rerank.data.collection_config import CollectionConfig
from rerank.data.ir_datasets_source import IrDatasetsSource
from rerank.data.pseudo_queries import PseudoQueryConfig, pseudo_queries, sized_to
from rerank.data.trec import read_run, write_run
from rerank.first_stage import FirstStageConfig
from rerank.teacher.scores import teacher_scores
from rerank.training.lists import TrainingLists, TrainingSampler, proportions
from rerank.training.sources import SourceContext, TrainingSource, resolve, source_run

pytestmark = pytest.mark.skipif(MINILM_VOCAB is None, reason="needs ../shared/hf_home")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cranfield_workdir(tmp_path_factory.mktemp("sources"))


def test_teacher_scores_from_a_run_are_its_scores(tmp_path: Path) -> None:
    write_run({"1": {"a": 3.5, "b": -1.25}, "2": {"c": 0.5}}, tmp_path / "teacher.run")
    candidates = {"1": {"a": 0.0, "b": 0.0, "x": 0.0}, "2": {"c": 0.0}}
    scores = teacher_scores(TeacherConfig(run=str(tmp_path / "teacher.run")), candidates, {}, None)
    # a candidate the teacher did not keep ranks below all it kept: the query's lowest teacher score
    assert scores == {"1": {"a": 3.5, "b": -1.25, "x": -1.25}, "2": {"c": 0.5}}
    with pytest.raises(ValueError, match=r"teacher.run .*teacher.run: 1 of 3 queries of the candidates are not in it "
                                         r"\(e.g. 3\)"):
        teacher_scores(TeacherConfig(run=str(tmp_path / "teacher.run")), {**candidates, "3": {"a": 0.0}}, {}, None)


def test_an_ensemble_teacher_mixes_z_scores_in_the_teachers_units(tmp_path: Path) -> None:
    import numpy as np

    teacher = {"1": {"a": 0.61, "b": 0.35, "c": 0.42, "d": 0.20}, "2": {"e": 0.9, "f": 0.1}}
    first_stage = {"1": {"a": 3.0, "b": 12.5, "c": 7.0, "d": 1.0}, "2": {"e": 2.0, "f": 4.0}}
    write_run(teacher, tmp_path / "teacher.run")
    scores = teacher_scores(TeacherConfig(run=str(tmp_path / "teacher.run"), first_stage_weight=0.3), first_stage,
                            {}, None)
    for qid, docs in teacher.items():  # by hand: 0.7 z(t) + 0.3 z(f), standardised, times std(t) plus mean(t)
        t, f = np.array(list(docs.values())), np.array([first_stage[qid][doc] for doc in docs])
        mixed = 0.7 * (t - t.mean()) / t.std() + 0.3 * (f - f.mean()) / f.std()
        expected = t.mean() + t.std() * (mixed - mixed.mean()) / mixed.std()
        assert [scores[qid][doc] for doc in docs] == pytest.approx(expected.tolist(), abs=1e-9)
    assert sorted(scores["1"], key=scores["1"].get) == ["d", "c", "b", "a"]  # b passes c: BM25 puts it first
    assert teacher_scores(TeacherConfig(run=str(tmp_path / "teacher.run")), first_stage, {}, None) == teacher
    with pytest.raises(ValueError, match=r"teacher.first_stage_weight must be in \[0, 1\)"):
        TeacherConfig(run="x", first_stage_weight=1.0)


def test_a_teacher_with_a_student_mixes_in_the_students_z_scores(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from rerank.inference.reranker import Reranker

    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    student = tiny_bert(tmp_path / "student", with_head=True, real_vocabulary=True)
    collection = Collection(CollectionConfig(**CRANFIELD))
    teacher = {"1": {"184": 0.61, "29": 0.35, "12": 0.42}, "2": {"12": 0.9, "51": 0.1, "486": 0.5}}
    write_run(teacher, tmp_path / "teacher.run")
    config = TeacherConfig(run=str(tmp_path / "teacher.run"), student=str(student), student_weight=0.4)
    scores = teacher_scores(config, teacher, collection.queries, collection.documents)
    reranker = Reranker.from_pretrained(str(student))
    for qid, docs in teacher.items():  # by hand: 0.6 z(teacher) + 0.4 z(student), in the teacher's units
        t = np.array(list(docs.values()))
        s = np.array(reranker.score(collection.queries[qid], [collection.documents.text(doc) for doc in docs]))
        mixed = 0.6 * (t - t.mean()) / t.std() + 0.4 * (s - s.mean()) / s.std()
        expected = t.mean() + t.std() * (mixed - mixed.mean()) / mixed.std()
        assert [scores[qid][doc] for doc in docs] == pytest.approx(expected.tolist(), abs=1e-5)
    assert scores != teacher
    monkeypatch.setattr("rerank.teacher.scores.PairScorer", None)  # a second call reads the cached student's scores
    assert teacher_scores(config, teacher, collection.queries, collection.documents) == scores
    with pytest.raises(FileNotFoundError, match=r"teacher.student .*nowhere: no model.safetensors there"):
        teacher_scores(TeacherConfig(run=str(tmp_path / "teacher.run"), student=str(tmp_path / "nowhere")), teacher,
                       collection.queries, collection.documents)
    with pytest.raises(ValueError, match=r"teacher.student_weight must be in \(0, 1\); got 1.0"):
        TeacherConfig(run="x", student="y", student_weight=1.0)
    with pytest.raises(ValueError, match=r"teacher.student_precision must be one of 32, bf16"):
        TeacherConfig(run="x", student="y", student_precision="bf16-mixed")


def test_bi_encoder_teacher_scores_are_cosines_and_are_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sentence_transformers import SentenceTransformer

    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    model = tiny_bi_encoder(tmp_path)
    collection = Collection(CollectionConfig(**CRANFIELD))
    candidates = {"1": dict.fromkeys(["184", "29", "12"]), "2": dict.fromkeys(["12", "51"])}
    config = TeacherConfig(bi_encoder=str(model), max_length=64)
    scores = teacher_scores(config, candidates, collection.queries, collection.documents)
    encoder = SentenceTransformer(str(model), device="cpu")
    encoder.max_seq_length = 64
    for qid, docs in candidates.items():
        query = encoder.encode(collection.queries[qid], normalize_embeddings=True, convert_to_tensor=True)
        for doc in docs:
            document = encoder.encode(collection.documents.text(doc), normalize_embeddings=True,
                                      convert_to_tensor=True)
            assert scores[qid][doc] == pytest.approx(float(query @ document), abs=1e-5)
    assert len({round(v, 4) for docs in scores.values() for v in docs.values()}) > 1
    monkeypatch.setattr("sentence_transformers.SentenceTransformer", None)  # a second call must not load the model
    assert teacher_scores(config, candidates, collection.queries, collection.documents) == scores


def test_pseudo_queries_are_deterministic_filtered_and_blind_to_judgments(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in [
        {"doc_id": "a", "title": "boundary layer transition on a flat plate", "text": "we measured it ."},
        {"doc_id": "b", "title": "flutter", "text": "a wing flutters in a wind tunnel at high speed . then stops ."},
        {"doc_id": "c", "title": "heat flux to blunt bodies", "text": "heat transfer is measured ."},
        {"doc_id": "d", "title": "heat flux to blunt bodies", "text": "the same title twice: ambiguous ."},
        {"doc_id": "e", "title": "", "text": "the of and ."},
    ]))
    (tmp_path / "queries.tsv").write_text("1\twind\n")
    (tmp_path / "qrels.txt").write_text("1 0 b 1\n")
    files = {"docs": str(tmp_path / "docs.jsonl"), "queries": str(tmp_path / "queries.tsv"),
             "cache_dir": str(tmp_path / "arrow")}
    judged = Collection(CollectionConfig(**files, qrels=str(tmp_path / "qrels.txt")))
    config = PseudoQueryConfig(count=None, min_words=2)
    drawn = pseudo_queries(judged.documents, config)
    by_doc = {query.doc_id: query.text for query in drawn}
    # a: its title; b: a one-word title, so its first sentence; c and d share a text; e has no content words
    assert by_doc == {"a": "boundary layer transition on a flat plate",
                      "b": "a wing flutters in a wind tunnel at high speed"}
    assert [query.query_id for query in drawn] == [f"pseudo:{query.doc_id}" for query in drawn]
    unjudged = Collection(CollectionConfig(**files))  # no qrels at all: the same queries
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "other-cache"))
    assert pseudo_queries(unjudged.documents, config) == drawn
    cranfield = Collection(CollectionConfig(**CRANFIELD)).documents
    first, again = (pseudo_queries(cranfield, PseudoQueryConfig(count=40, seed=1)) for _ in range(2))
    other = pseudo_queries(cranfield, PseudoQueryConfig(count=40, seed=2))
    assert first == again and len(first) == 40 and {q.doc_id for q in first} != {q.doc_id for q in other}


def test_pseudo_queries_per_document_add_the_next_sentences_of_the_body(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in [
        {"doc_id": "a", "title": "boundary layer transition on a flat plate",
         "text": "boundary layer transition on a flat plate . it is . wind tunnel tests of transition ."},
        {"doc_id": "b", "title": "flutter", "text": "a wing flutters in a tunnel at high speed . then stops . "
                                                    "supersonic panel flutter theory compared . a fourth sentence ."},
        {"doc_id": "c", "title": "heat flux to blunt bodies", "text": "heat transfer is measured ."},
        {"doc_id": "d", "title": "heat flux to blunt bodies", "text": "the same title twice: ambiguous ."},
    ]))
    (tmp_path / "queries.tsv").write_text("1\twind\n")
    documents = Collection(CollectionConfig(docs=str(tmp_path / "docs.jsonl"), queries=str(tmp_path / "queries.tsv"),
                                            cache_dir=str(tmp_path / "arrow"))).documents
    drawn = pseudo_queries(documents, PseudoQueryConfig(count=None, min_words=2, per_document=3))
    # a: its title, then (the first sentence repeats the title; "it is" has no content word) the third;
    # b: a one-word title, so its first sentence ranks first, then the next usable one; c and d: the shared title is
    # nobody's, each keeps its own sentence; every query names the document it came from
    assert {query.query_id: (query.text, query.doc_id) for query in drawn} == {
        "pseudo:a": ("boundary layer transition on a flat plate", "a"),
        "pseudo:a#2": ("wind tunnel tests of transition", "a"),
        "pseudo:b": ("a wing flutters in a tunnel at high speed", "b"),
        "pseudo:b#2": ("supersonic panel flutter theory compared", "b"),
        "pseudo:c#2": ("heat transfer is measured", "c"),
        "pseudo:d#2": ("the same title twice: ambiguous", "d"),
    }
    assert {q.query_id for q in pseudo_queries(documents, PseudoQueryConfig(count=None, min_words=2))} == {
        "pseudo:a", "pseudo:b"}  # one per document: the titles (else first sentences), as before
    cranfield = Collection(CollectionConfig(**CRANFIELD)).documents
    several = pseudo_queries(cranfield, PseudoQueryConfig(count=45, per_document=4))
    assert len(several) == 45 and len({q.doc_id for q in several}) < 45  # count is exact, documents give several
    assert several[:12] == pseudo_queries(cranfield, PseudoQueryConfig(count=12, per_document=4))
    with pytest.raises(ValueError, match=r"pretrain.train\[0\]: pseudo.per_document must be >= 1; got 0"):
        as_source_config({"queries": "pseudo", "pseudo": {"per_document": 0}}, "pretrain.train[0]")


def test_paragraph_queries_make_spans_of_whole_sentences_whose_lengths_follow_theirs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    words = [f"w{i}" for i in range(400)]

    def sentence(doc: int, index: int) -> str:  # ten distinct words and a full stop
        return " ".join(words[(doc * 7 + index * 10 + k) % 400] for k in range(10)) + "."

    docs = [{"doc_id": f"d{doc}", "title": f"title {doc} of a document",
             "text": " ".join(sentence(doc, index) for index in range(12))} for doc in range(30)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    queries = {"1": " ".join(words[:20]), "2": " ".join(words[:40]), "3": " ".join(words[:40]), "4": "wind"}
    (tmp_path / "queries.tsv").write_text("".join(f"{qid}\t{text}\n" for qid, text in queries.items()))
    documents = Collection(CollectionConfig(docs=str(tmp_path / "docs.jsonl"), queries=str(tmp_path / "queries.tsv"),
                                            cache_dir=str(tmp_path / "arrow"))).documents
    assert not sized_to(PseudoQueryConfig(count=None, max_words="auto"), queries.values()).spans  # the default
    config = sized_to(PseudoQueryConfig(count=None, max_words="auto", lengths="queries"), queries.values())
    # a median of 30 words: paragraphs, so spans, their lengths drawn from the queries' (1 word: min_words 3)
    assert config.spans and sorted(config.lengths) == [3, 20, 40, 40] and config.max_words == 192
    drawn = pseudo_queries(documents, config)
    assert len(drawn) == 30 and drawn == pseudo_queries(documents, config)
    for query in drawn:
        body = documents.text(query.doc_id).removeprefix(f"title {query.doc_id[1:]} of a document").strip()
        assert f" {query.text} " in f" {body} " and query.text.endswith(".")  # whole sentences of its body
        # the run of sentences closest to a drawn length: 3 words -> one sentence, 20 -> two, 40 -> four
        assert len(query.text.split()) in (10, 20, 40)
    counts = Counter(len(query.text.split()) for query in drawn)
    assert counts[40] > counts[20] and counts[40] > counts[10]  # 40 words is drawn twice as often as each other
    assert sized_to(PseudoQueryConfig(max_words="auto"), ["wind tunnel", "heat"]) == PseudoQueryConfig(max_words=3)
    assert sized_to(PseudoQueryConfig(max_words="auto", lengths="queries"), ["wind tunnel", "heat"]) == \
        PseudoQueryConfig(max_words=3)  # short queries: titles, as without lengths
    with pytest.raises(ValueError, match="pseudo.lengths: numbers of words, or queries; got 'query'"):
        PseudoQueryConfig(lengths="query")
    with pytest.raises(ValueError, match=r"pretrain.train\[0\]: pseudo.lengths: numbers of words"):
        as_source_config({"queries": "pseudo", "pseudo": {"lengths": [12, 0]}}, "pretrain.train[0]")


def test_mixing_weights_give_the_configured_proportions() -> None:
    def source(name: str, queries: int, weight: float) -> TrainingSource:
        lists = CandidateLists.from_run({f"{name}{i}": {"d": 1.0} for i in range(queries)}, qrels={
            f"{name}{i}": {"d": 1} for i in range(queries)})
        return TrainingSource(name=name, lists=lists, documents=None, weight=weight, strategy="top")

    dataset = TrainingLists([source("a", 30, 1.0), source("b", 7, 3.0), source("c", 3, 0.5)], list_size=1, seed=0)
    assert proportions([1.0, 3.0, 0.5], 80) == [18, 53, 9]  # 80 * (2/9, 6/9, 1/9), rounded to sum to 80
    for world in (1, 2):
        drawn: Counter = Counter()
        for rank in range(world):
            sampler = TrainingSampler(dataset, repeats=2, batch_size=4, num_replicas=world, rank=rank, seed=5)
            sampler.set_epoch(3)
            keys = list(sampler)
            assert all(epoch == 3 for epoch, _, _ in keys)
            drawn.update(which for _, which, _ in keys)
        assert [drawn[0], drawn[1], drawn[2]] == [18, 53, 9]
    # a source drawn more often than it has queries visits all of them, again and again
    sampler = TrainingSampler(dataset, repeats=2, batch_size=4, num_replicas=1, rank=0, seed=5)
    visits = Counter(index for _, which, index in sampler if which == 1)
    assert set(visits) == set(range(7)) and max(visits.values()) - min(visits.values()) <= 1


def test_bad_sources_fail_before_training_naming_the_option(workdir: Path) -> None:
    with pytest.raises(ValueError, match=r"data.train\[1\]: weight must be > 0; got 0"):
        as_source_config({"weight": 0}, "data.train[1]")
    with pytest.raises(ValueError, match=r"data.train\[0\]: targets teacher needs a teacher"):
        as_source_config({"targets": "teacher"}, "data.train[0]")
    with pytest.raises(ValueError, match=r"data.train\[0\]: unknown option\(s\) wieght"):
        as_source_config({"wieght": 1}, "data.train[0]")
    with pytest.raises(ValueError, match=r"pretrain.train\[0\]: a stage shared by every fold cannot use"):
        PretrainConfig(train=[{"queries": "train"}])
    collection = Collection(CollectionConfig(**CRANFIELD))
    first_stage = FirstStageConfig(backend="run", run=str(workdir / "bm25.run"))
    context = SourceContext(collection=collection, first_stage=first_stage,
                            first_stage_run=read_candidates(workdir / "bm25.run"), train_query_ids=["1", "2"],
                            rerank_depth=20, strategy="random")
    empty_teacher = workdir / "flat.run"
    write_run({qid: dict.fromkeys(docs, 0.5) for qid, docs in read_run(workdir / "bm25.run").items()}, empty_teacher)
    with pytest.raises(ValueError, match=r"data.train\[2\]: none of its 2 queries can be trained on"):
        resolve(SourceConfig(targets="teacher", teacher=TeacherConfig(run=str(empty_teacher))), "data.train[2]",
                context)


def test_sources_resolve_labels_and_teacher_scores(workdir: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    collection = Collection(CollectionConfig(**CRANFIELD))
    run = read_run(workdir / "bm25.run")
    first_stage = FirstStageConfig(backend="run", run=str(workdir / "bm25.run"))
    context = SourceContext(collection=collection, first_stage=first_stage,
                            first_stage_run=read_candidates(workdir / "bm25.run"), train_query_ids=["1", "2", "3"],
                            rerank_depth=10,
                            strategy="random")
    teacher = TeacherConfig(run=str(workdir / "bm25.run"))
    both = resolve(SourceConfig(targets="both", teacher=teacher), "both", context)
    assert [c.query_id for c in both.lists] == ["1", "2", "3"] and both.strategy == "random"
    qrels = collection.qrels
    for candidates in both.lists:
        assert candidates.teacher.tolist() == [run[candidates.query_id][doc] for doc in candidates.doc_ids]
        judged = qrels[candidates.query_id]
        assert candidates.labels.tolist() == [max(judged.get(doc, 0), 0) for doc in candidates.doc_ids]
    only_teacher = resolve(SourceConfig(targets="teacher", teacher=teacher), "teacher", context)
    assert only_teacher.strategy == "sample" and not only_teacher.lists.labels.any()
    pseudo = resolve(SourceConfig(queries="pseudo", pseudo=PseudoQueryConfig(count=12),
                                  first_stage=FirstStageConfig(backend="bm25s", index_dir=str(tmp_path / "idx"))),
                     "pseudo", context)
    assert len(pseudo.lists) == 12
    for candidates in pseudo.lists:  # the source document is the one relevant candidate
        source = candidates.query_id.removeprefix("pseudo:")
        assert len(candidates.doc_ids) == 10 and candidates.labels[candidates.doc_ids.index(source)] == 1
        assert candidates.labels.sum() == 1
    # spans learn from a teacher over the other documents: a span's own document holds its words verbatim
    spans = PseudoQueryConfig(count=12, max_words=40, lengths=(25, 40))
    bm25s = FirstStageConfig(backend="bm25s", index_dir=str(tmp_path / "idx"))
    taught = resolve(SourceConfig(queries="pseudo", pseudo=spans, first_stage=bm25s, targets="teacher",
                                  teacher=TeacherConfig(bi_encoder=str(tiny_bi_encoder(tmp_path)))), "spans", context)
    texts = {query.query_id: query.text for query in pseudo_queries(collection.documents, spans)}
    retrieved = source_run(collection, dataclasses.replace(bm25s, retrieval_depth=10), texts).as_run()
    assert len(taught.lists) == 12
    for candidates in taught.lists:
        source = candidates.query_id.removeprefix("pseudo:")
        assert source not in candidates.doc_ids and not candidates.labels.any()
        assert candidates.doc_ids == [doc for doc in retrieved[candidates.query_id] if doc != source][:10]


def write_config(workdir: Path, path: Path, **sections: object) -> Path:
    config = {"model": {"model_name": str(workdir / "bert"), "loss": "listnet",
                        "tokenization": {"max_length": 48, "max_query_length": 12}},
              "data": {"collection": CRANFIELD, "first_stage": {"backend": "run", "run": str(workdir / "bm25.run")},
                       "folds": {"scheme": "kfold", "count": 5, "seed": 42, "test": 1}, "rerank_depth": 20,
                       "list_size": 4, "batch_size": 2},
              "trainer": {"max_epochs": 1, "limit_train_batches": 3, "enable_progress_bar": False, "logger": False,
                          "num_sanity_val_steps": 0}}
    for name, section in sections.items():
        config[name] = {**config.get(name, {}), **section}
    path.write_text(yaml.safe_dump(config))
    return path


def staged_config(workdir: Path, tmp_path: Path) -> Path:
    """A fit with a 3-step stage of pseudo-queries taught by a tiny bi-encoder, then qrels and a teacher run."""
    stage = {"train": [{"queries": "pseudo", "pseudo": {"count": 20},
                        "first_stage": {"backend": "bm25s", "index_dir": str(tmp_path / "idx")},
                        "targets": "teacher", "teacher": {"bi_encoder": str(tiny_bi_encoder(tmp_path))}}],
             "max_steps": 3}
    return write_config(workdir, tmp_path / "config.yaml", pretrain=stage,
                        data={"train": [{"targets": "both", "teacher": {"run": str(workdir / "bm25.run")}}]})


def test_the_pretraining_stage_is_cached_and_reruns_identically(workdir: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    config = staged_config(workdir, tmp_path)
    with caplog.at_level(logging.INFO):
        first = fit.main(["--config", str(config), "--output_dir", str(tmp_path / "first")])
    assert "pre-training stage, round 1 of 1: 3 steps on 1 source(s)" in caplog.text
    assert len(list((tmp_path / "cache" / "pretrained").glob("*.safetensors"))) == 1
    caplog.clear()
    with caplog.at_level(logging.INFO):
        second = fit.main(["--config", str(config), "--output_dir", str(tmp_path / "second"),
                           "--data.folds.test", "1"])
    assert "pre-training stage, round 1 of 1: weights from the cache" in caplog.text
    assert second == first  # loading the stage continues exactly as training it did
    # the qrels head cannot touch a stage of teacher targets: trained anew with another head, the stage has the same
    # weights, to the bit, under the same key, so that every head of a loss study shares one cached stage
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "other-cache"))
    fit.main(["--config", str(config), "--output_dir", str(tmp_path / "hinge"), "--model.loss", "hinge"])
    stages = [sorted((tmp_path / cache / "pretrained").glob("*.safetensors")) for cache in ("cache", "other-cache")]
    assert [path.name for path in stages[0]] == [path.name for path in stages[1]] and len(stages[0]) == 1
    listnet, hinge = (load_file(paths[0]) for paths in stages)
    assert listnet.keys() == hinge.keys() and all(torch.equal(listnet[name], hinge[name]) for name in listnet)


def test_the_folds_train_at_their_own_rate_from_the_stage_cached_at_its_own(workdir: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    """``pretrain.optimizer``: a learning-rate search over the folds keeps the stage every head shares."""
    config = staged_config(workdir, tmp_path)
    default = str(OptimizerSettings().encoder_lr)
    folds_faster = ["--model.optimizer.encoder_lr", "1e-2"]

    def fitted(cache: str, name: str, *options: str) -> dict[str, torch.Tensor]:
        monkeypatch.setenv("RERANK_CACHE", str(tmp_path / cache))
        caplog.clear()
        with caplog.at_level(logging.INFO):
            fit.main(["--config", str(config), "--output_dir", str(tmp_path / name), *options])
        return load_file(tmp_path / name / "model" / "model.safetensors")

    def stages(cache: str) -> list[Path]:
        return sorted((tmp_path / cache / "pretrained").glob("*.safetensors"))

    first = fitted("cache", "first")
    faster = fitted("cache", "faster", *folds_faster, "--pretrain.optimizer.encoder_lr", default)
    assert "pre-training stage, round 1 of 1: weights from the cache" in caplog.text and len(stages("cache")) == 1
    assert any(not torch.equal(first[name], faster[name]) for name in first)  # the folds trained at 1e-2
    # trained anew under the folds' 1e-2, the stage set to the default rate is the default stage, to the bit
    fitted("other-cache", "again", *folds_faster, "--pretrain.optimizer.encoder_lr", default)
    assert "round 1 of 1: 3 steps on 1 source(s)" in caplog.text
    (cached,), (again,) = stages("cache"), stages("other-cache")
    assert cached.name == again.name
    cached_weights, again_weights = load_file(cached), load_file(again)
    assert all(torch.equal(cached_weights[name], again_weights[name]) for name in cached_weights)
    # without pretrain.optimizer the stage trains at the model's rate: another stage, cached under another key
    fitted("other-cache", "whole", *folds_faster)
    assert "round 1 of 1: 3 steps on 1 source(s)" in caplog.text and len(stages("other-cache")) == 2
    (other,) = [path for path in stages("other-cache") if path.name != again.name]
    assert any(not torch.equal(cached_weights[name], tensor) for name, tensor in load_file(other).items())


def test_pseudo_queries_of_max_words_auto_are_no_longer_than_the_collection_queries(
        workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    auto = PseudoQueryConfig(max_words="auto", min_words=2)  # the longest query's words, within min_words and 24
    assert sized_to(auto, ["wind", "heat flux to blunt bodies"]).max_words == 5
    long = " ".join(["wind"] * 30)
    assert sized_to(auto, ["wind"]).max_words == 2 and sized_to(auto, [long, "wind", "flutter"]).max_words == 24
    assert not sized_to(auto, [long, "wind", "flutter"]).spans  # a median of one word: titles, not spans
    assert sized_to(PseudoQueryConfig(max_words=7), ["wind"]) == PseudoQueryConfig(max_words=7)  # a number is kept
    cranfield = Collection(CollectionConfig(**CRANFIELD))
    with pytest.raises(TypeError, match="max_words: auto"):
        pseudo_queries(cranfield.documents, auto)
    for wrong in ("aut", 2.5):  # a typo is named, with the source it is in
        with pytest.raises(ValueError, match=rf"^pretrain.train\[0\]: pseudo.max_words: a number of words, or auto; "
                                             rf"got {wrong!r}$"):
            as_source_config({"queries": "pseudo", "targets": "teacher", "teacher": {"run": "x.run"},
                              "pseudo": {"max_words": wrong}}, "pretrain.train[0]")
    # Cranfield's longest query has 46 words: auto gives the fixed 24 the recipes were measured with
    assert max(len(text.split()) for text in cranfield.queries.values()) == 46
    assert sized_to(PseudoQueryConfig(max_words="auto"), cranfield.queries.values()) == PseudoQueryConfig()
    stage = {"train": [{"queries": "pseudo", "pseudo": {"count": 20, "max_words": "auto"},
                        "first_stage": {"backend": "bm25s", "index_dir": str(tmp_path / "idx")},
                        "targets": "teacher", "teacher": {"bi_encoder": str(tiny_bi_encoder(tmp_path))}}],
             "max_steps": 2}
    config = write_config(workdir, tmp_path / "config.yaml", pretrain=stage)
    with caplog.at_level(logging.INFO):
        fit.main(["--config", str(config), "--output_dir", str(tmp_path / "long")])
    assert "pretrain.train[0]: pseudo-queries of at most 24 words (max_words: auto: the longest of the 225 queries" \
        in caplog.text
    assert "round 1 of 1: 2 steps" in caplog.text
    # the same collection with queries of at most 4 words: pseudo-queries of 4 words, and so another stage
    full = IrDatasetsSource.queries
    monkeypatch.setattr(IrDatasetsSource, "queries",
                        lambda self: {qid: " ".join(text.split()[:4]) for qid, text in full(self).items()})
    caplog.clear()
    with caplog.at_level(logging.INFO):
        fit.main(["--config", str(config), "--output_dir", str(tmp_path / "short")])
    assert "pseudo-queries of at most 4 words" in caplog.text and "round 1 of 1: 2 steps" in caplog.text
    drawn = [path for path in (tmp_path / "cache" / "pseudo_queries").glob("*.tsv")]
    lengths = sorted({max(len(line.split("\t")[1].split()) for line in path.read_text().splitlines())
                      for path in drawn})
    assert len(drawn) == 2 and lengths[0] == 4 < lengths[1] <= 24  # 20 titles, the longest of 21 words
    assert len(list((tmp_path / "cache" / "pretrained").glob("*.safetensors"))) == 2


def test_lengths_queries_keeps_a_title_stage_under_its_key_and_trains_spans_under_another(
        workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The default's ``lengths: queries``: on queries that are not paragraphs (Cranfield's) it resolves to titles, the
    stage of a source without ``lengths``, and shares its cached weights (a stage is keyed by its sources as resolved);
    on paragraphs, spans: another stage."""
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))

    def staged(name: str, pseudo: dict) -> str:
        stage = {"train": [{"queries": "pseudo", "pseudo": {"count": 20, "max_words": "auto", **pseudo},
                            "first_stage": {"backend": "bm25s", "index_dir": str(tmp_path / "idx")},
                            "targets": "teacher", "teacher": {"bi_encoder": str(tiny_bi_encoder(tmp_path))}}],
                 "max_steps": 2}
        caplog.clear()
        with caplog.at_level(logging.INFO):
            fit.main(["--config", str(write_config(workdir, tmp_path / f"{name}.yaml", pretrain=stage)),
                      "--output_dir", str(tmp_path / name)])
        return caplog.text

    def stages() -> int:
        return len(list((tmp_path / "cache" / "pretrained").glob("*.safetensors")))

    assert "round 1 of 1: 2 steps" in staged("titles", {}) and stages() == 1
    log = staged("queries", {"lengths": "queries"})
    assert "pseudo-queries of at most 24 words (lengths: queries: the 225 queries of" in log
    assert "round 1 of 1: weights from the cache" in log and stages() == 1
    full = IrDatasetsSource.queries  # the same queries said three times: a median above 24 words, paragraphs
    monkeypatch.setattr(IrDatasetsSource, "queries",
                        lambda self: {qid: " ".join([text] * 3) for qid, text in full(self).items()})
    log = staged("paragraphs", {"lengths": "queries"})
    assert "pseudo-queries are spans of whole sentences" in log and "round 1 of 1: 2 steps" in log and stages() == 2


def test_born_again_rounds_continue_from_the_cached_first_round_and_teach_with_its_student(
        workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    stage = {"train": [{"queries": "pseudo", "pseudo": {"count": 20},
                        "first_stage": {"backend": "bm25s", "index_dir": str(tmp_path / "idx")},
                        "targets": "teacher", "teacher": {"bi_encoder": str(tiny_bi_encoder(tmp_path))}}],
             "max_steps": 2}
    folds = {"train": [{"targets": "both", "teacher": {"run": str(workdir / "bm25.run")}}]}
    one = write_config(workdir, tmp_path / "one.yaml", pretrain=stage, data=folds)
    two = write_config(workdir, tmp_path / "two.yaml", pretrain={**stage, "rounds": 2}, data=folds)
    fit.main(["--config", str(one), "--output_dir", str(tmp_path / "one")])
    with caplog.at_level(logging.INFO):
        first = fit.main(["--config", str(two), "--output_dir", str(tmp_path / "two")])
    assert "round 1 of 2: weights from the cache" in caplog.text  # round 1 is the one-round stage
    assert "round 2 of 2: 2 steps on 1 source(s)" in caplog.text
    cached = tmp_path / "cache" / "pretrained"
    weights, (student,) = sorted(cached.glob("*.safetensors")), [path for path in cached.iterdir() if path.is_dir()]
    assert len(weights) == 2 and student.with_suffix(".safetensors") in weights  # the student is round 1
    tagged = Counter(line.split()[-1] for run in (tmp_path / "cache" / "teacher").glob("*.trec")
                     for line in run.read_text().splitlines()[:1])
    # the student scored the pseudo-queries' candidates (round 2), the training folds' (their teacher), and the
    # validation and test queries' (the teacher's figures beside the re-ranker's)
    assert tagged[f"student-{student.name}"] == 4
    # scripts/data/export_stage.py exports a cached stage as the folder the pre-training wrote for its student
    monkeypatch.setattr("sys.argv", ["export_stage.py", str(student.with_suffix(".safetensors")),
                                     str(tmp_path / "exported"), "--model", str(workdir / "bert"),
                                     "--max_length", "48", "--max_query_length", "12"])
    runpy.run_path(str(script_path("export_stage.py")), run_name="__main__")
    exported, written = (load_file(folder / "model.safetensors") for folder in (tmp_path / "exported", student))
    assert exported.keys() == written.keys() and all(exported[key].equal(written[key]) for key in written)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        again = fit.main(["--config", str(two), "--output_dir", str(tmp_path / "again")])
    assert "round 2 of 2: weights from the cache" in caplog.text and again == first
    for bad, message in (({"rounds": 0}, r"pretrain.rounds must be >= 1; got 0"),
                         ({"student_weight": 1.0}, r"pretrain.student_weight must be in \(0, 1\); got 1.0")):
        with pytest.raises(ValueError, match=message):
            PretrainConfig(**{**stage, **bad})


def merged_config(*names: str, capsys: pytest.CaptureFixture) -> dict:
    """The config ``rerank fit`` runs with ``--config`` each of ``names``, as ``--print_config`` prints it."""
    with pytest.raises(SystemExit) as exited:
        fit.main([*(part for name in names for part in ("--config", name)), "--print_config"])
    assert exited.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


STACKED = ("recipes/clicks", "losses", "hardware")
"""Config folders whose files stack on the default (cranfield.yaml), beside the ablation study's (:data:`ABLATION`)."""
ABLATION = REPO / "scripts" / "studies" / "ablation" / "configs"
"""The configs of the ablation study (docs/experiments/README.md), each stacked on the default."""


@pytest.mark.parametrize("name", ["cranfield", "transfer/nfcorpus-to-cranfield", "transfer/finetune-from-export",
                                  "transfer/msmarco-pretrain", "scifact",
                                  *(f"{folder}/{path.stem}" for folder in STACKED for path in
                                    sorted((REPO / "rerank" / "configs" / folder).glob("*.yaml"))),
                                  *(str(path) for path in sorted(ABLATION.glob("*.yaml")))])
def test_example_configs_parse(name: str, capsys: pytest.CaptureFixture) -> None:
    stacked = ["cranfield"] if name.startswith((*(f"{folder}/" for folder in STACKED), str(ABLATION))) else []
    config = merged_config(*stacked, name, capsys=capsys)
    assert config["data"]["train"] or config["pretrain"]


DEMO = {"model": {"tokenization": {"max_length": 128}}, "pretrain": {"max_steps": 500}}
"""What `make run` pins (demo.yaml): the default before it sized itself, which the ablations below were measured on."""
SIZED = {"model": {"tokenization": {"max_length": "auto"}},
         "pretrain": {"max_steps": "auto", "passes": 1.5, "budget_minutes": 60}}
"""The default since it sizes itself (docs/experiments/sized-default.md): rows and stage sized to the collection and a
time budget."""
ONE_EPOCH = {"pretrain": {"max_steps": 570}, "trainer": {"max_epochs": 1}}
"""The default as first chosen (ablation/one-epoch.yaml): the demo trades 70 stage steps for a second epoch."""
STOCK = {"encoder_dropout": None, "freeze_embeddings": False}
DEFAULT_VARIANTS = {  # the candidates compared with one-epoch on validation: the same time, other settings
    "one-epoch": {},
    "row96": {"model": {"tokenization": {"max_length": 96}}, "pretrain": {"max_steps": 720}},
    "row192": {"model": {"tokenization": {"max_length": 192}}, "pretrain": {"max_steps": 360}},
    "row128-stock": {"model": {**STOCK, "tokenization": {"max_length": 128}}, "pretrain": {"max_steps": 450}},
    "row128-stock-lr1e-4": {"model": {**STOCK, "optimizer": {"encoder_lr": 1e-4}, "tokenization": {"max_length": 128}},
                            "pretrain": {"max_steps": 450}},
    "row192-stock": {"model": {**STOCK, "tokenization": {"max_length": 192}}, "pretrain": {"max_steps": 270}},
}


def on_cranfield(config: dict) -> dict:
    """``config`` with its stage's pseudo-queries as Cranfield resolves them: ``max_words: auto`` 24 (its longest query
    has 46 words: test_pseudo_queries_of_max_words_auto_are_no_longer_than_the_collection_queries) and ``lengths:
    queries`` titles (a median of at most 24 words), so that a recipe that reads ``auto`` and ``queries`` compares
    equal to one that pins 24 titles, as every recipe measured on Cranfield read."""
    stage = config.get("pretrain") or {}
    if not stage.get("train"):
        return config

    def titles(pseudo: dict) -> dict:
        resolved = {**pseudo, "max_words": 24} if pseudo.get("max_words") == "auto" else pseudo
        return {key: value for key, value in resolved.items() if (key, value) != ("lengths", "queries")}

    train = [{**source, "pseudo": titles(source["pseudo"])} if source.get("pseudo") else source
             for source in stage["train"]]
    return {**config, "pretrain": {**stage, "train": train}}


def merged(config: dict, change: dict) -> dict:
    """``config`` with ``change`` written over it, mapping into mapping."""
    return {key: merged(value, change[key]) if isinstance(value, dict) and key in change else change.get(key, value)
            for key, value in config.items()}


def test_the_default_sizes_itself_and_the_demo_pins_what_it_sized_before(capsys: pytest.CaptureFixture) -> None:
    default = merged_config("cranfield", capsys=capsys)
    tokenization = default["model"]["tokenization"]
    assert (tokenization["max_length"], tokenization["max_query_length"], tokenization["max_length_cap"]) == (
        "auto", "auto", "auto")
    assert (default["pretrain"]["max_steps"], default["pretrain"]["passes"], default["pretrain"]["budget_minutes"]) == (
        "auto", 1.5, 60)
    assert default["pretrain"]["train"][0]["pseudo"] == {"count": 2000, "max_words": "auto", "lengths": "queries"}
    demo = merged_config("cranfield", "demo", capsys=capsys)
    assert demo["pretrain"]["train"][0]["pseudo"] == {"count": 2000, "max_words": 24}  # as measured, elsewhere too
    # the two differ in the rows and the stage's steps, and in nothing else on Cranfield
    assert on_cranfield(merged(demo, SIZED)) == on_cranfield(default)
    assert on_cranfield(merged(default, DEMO)) == demo
    makefile = (Path(__file__).parents[1] / "Makefile").read_text()
    assert "rerank fit --config cranfield.yaml --config demo.yaml " in makefile  # `make run` is the demo


def test_the_ablations_keep_the_recipes_they_were_measured_with(capsys: pytest.CaptureFixture) -> None:
    def resolved(*names: str) -> dict:  # every ablation was measured on Cranfield, where max_words: auto is 24
        return on_cranfield(merged_config(*names, capsys=capsys))

    default = resolved("cranfield", "demo")  # the default they were measured against
    stage, folds, tokenization = default["pretrain"], default["data"]["train"], default["model"]["tokenization"]
    ensemble = {"bi_encoder": "sentence-transformers/all-MiniLM-L6-v2", "first_stage_weight": 0.4}
    assert (stage["max_steps"], stage["train"][0]["pseudo"]["count"], stage["train"][0]["teacher"]) == (
        500, 2000, ensemble)
    assert folds[0]["teacher"] == ensemble
    assert (default["trainer"]["precision"], default["trainer"]["max_epochs"]) == ("32-true", 2)
    assert (tokenization["max_length"], tokenization["max_query_length"]) == (128, "auto")
    assert (default["model"]["encoder_dropout"], default["model"]["freeze_embeddings"]) == (0.0, True)
    # the previous default: a 1,200-step stage, 192 tokens (queries cut at 48), 2 epochs, bf16-mixed
    of_that_time = {"model": {**default["model"], **STOCK, "tokenization": {**tokenization, "max_length": 192,
                                                                             "max_query_length": 48}},
                    "pretrain": {**stage, "max_steps": 1200},
                    "trainer": {**default["trainer"], "max_epochs": 2}}
    previous = resolved("cranfield", f"{ABLATION}/previous-default.yaml")
    assert previous == {**default, **of_that_time, "trainer": {**of_that_time["trainer"], "precision": "bf16-mixed"}}
    # `all`, the default of earlier releases: 200 steps on 1,000 pseudo-queries, the bi-encoder alone, 32-true
    earlier = resolved("cranfield", f"{ABLATION}/all.yaml")
    assert (earlier["pretrain"]["max_steps"], earlier["pretrain"]["train"][0]["pseudo"]["count"]) == (200, 1000)
    assert earlier["pretrain"]["train"][0]["teacher"] == earlier["data"]["train"][0]["teacher"] == {
        "bi_encoder": "sentence-transformers/all-MiniLM-L6-v2"}
    # `ensemble-longer` is the previous default as measured before it moved to bf16-mixed
    measured = resolved("cranfield", f"{ABLATION}/ensemble-longer.yaml")
    assert measured == {**previous, "trainer": {**previous["trainer"], "precision": "32-true"}}
    # the levers tried on the previous default, in bf16-mixed: each changes it in one place only
    pseudo = {"count": None, "per_document": 4}
    assert resolved("cranfield", f"{ABLATION}/sentences.yaml") == {
        **previous, "pretrain": {**previous["pretrain"], "train": [{**stage["train"][0], "pseudo": pseudo}]}}
    assert resolved("cranfield", f"{ABLATION}/lists16.yaml") == {
        **previous, "data": {**previous["data"], "list_size": 16, "batch_size": 1}}
    assert resolved("cranfield", f"{ABLATION}/lr1e-4.yaml") == {
        **previous, "model": {**previous["model"], "optimizer": {**previous["model"]["optimizer"], "encoder_lr": 1e-4}}}
    assert resolved("cranfield", f"{ABLATION}/born-again.yaml") == {
        **previous, "pretrain": {**previous["pretrain"], "rounds": 2}}
    # the variants compared with one-epoch on validation (docs/experiments/results.md): each changes it in one place
    for name, change in DEFAULT_VARIANTS.items():
        assert resolved("cranfield", f"{ABLATION}/{name}.yaml") == merged(merged(default, ONE_EPOCH),
                                                                                          change), name
    # lever A of the paragraph-queries study (docs/experiments/README.md): its stage's pseudo-queries follow the
    # queries' lengths; adopted with lever C, it is the default's, and `titles` is the default before it
    sized = merged_config("cranfield", capsys=capsys)
    assert merged_config("cranfield", f"{ABLATION}/spans.yaml", capsys=capsys) == sized
    spans = sized["pretrain"]["train"][0]
    titles = {**spans, "pseudo": {key: value for key, value in spans["pseudo"].items() if key != "lengths"}}
    assert merged_config("cranfield", f"{ABLATION}/titles.yaml", capsys=capsys) == {
        **sized, "pretrain": {**sized["pretrain"], "train": [titles]}}
    on_the_default = {*DEFAULT_VARIANTS, "spans", "titles"}
    on_the_previous = {"previous-default", "sentences", "lists16", "lr1e-4", "born-again"}
    for name in sorted(ABLATION.glob("*.yaml")):
        ablation = resolved("cranfield", str(name))
        measured_in = ("32-true" if name.stem in on_the_default else "bf16-mixed" if name.stem in on_the_previous
                       else "32-true")  # the earliest ones on the AMD CPU
        assert ablation["trainer"]["precision"] == measured_in, name
        assert yaml.safe_load(name.read_text())["trainer"]["precision"] == measured_in, name  # pinned in the file
        if name.stem not in on_the_default:  # those of earlier defaults pin the tokenization of their time
            assert yaml.safe_load(name.read_text())["model"]["tokenization"] == {"max_length": 192,
                                                                                 "max_query_length": 48}, name
        assert all(source.get("teacher") in (None, ensemble, earlier["data"]["train"][0]["teacher"])
                   for source in ablation["data"]["train"] + ((ablation["pretrain"] or {}).get("train") or []))


def test_the_click_configs_keep_the_recipe_they_were_measured_with(capsys: pytest.CaptureFixture) -> None:
    one_epoch = merged_config("cranfield", f"{ABLATION}/one-epoch.yaml", capsys=capsys)
    for name in sorted((Path(__file__).parents[1] / "rerank" / "configs" / "recipes" / "clicks").glob("*.yaml")):
        clicks = merged_config("cranfield", f"clicks/{name.stem}", capsys=capsys)
        assert (clicks["pretrain"], clicks["trainer"], clicks["model"]["tokenization"]) == (
            one_epoch["pretrain"], one_epoch["trainer"], one_epoch["model"]["tokenization"]), name


def test_msmarco_without_its_data_says_where_it_goes() -> None:
    collection = Collection(CollectionConfig(ir_datasets="msmarco-passage/train"))
    with pytest.raises(FileNotFoundError, match=r"msmarco-passage/train.*IR_DATASETS_HOME.*msmarco-passage/"):
        _ = collection.queries


def test_the_teacher_command_writes_a_teacher_run(workdir: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from rerank.cli import teacher
    from rerank.data.trec import top_k
    from rerank.evaluation.measures import evaluate
    from rerank.teacher.scores import bi_encoder_scores

    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    model = tiny_bi_encoder(tmp_path)
    metrics = teacher.main(["--data.collection", json.dumps(CRANFIELD), "--run", str(workdir / "bm25.run"),
                            "--teacher.bi_encoder", str(model), "--teacher.max_length", "64",
                            "--data.rerank_depth", "10", "--output_dir", str(tmp_path / "out")])
    written = read_run(tmp_path / "out" / "teacher.trec")
    candidates = top_k(read_run(workdir / "bm25.run"), 10)
    assert {qid: set(docs) for qid, docs in written.items()} == {qid: set(docs) for qid, docs in candidates.items()}
    collection = Collection(CollectionConfig(**CRANFIELD))
    expected = bi_encoder_scores(candidates, collection.queries, collection.documents, str(model), 64)
    for qid, docs in expected.items():
        assert written[qid] == pytest.approx(docs, abs=1e-6)
    assert metrics["teacher"] == pytest.approx(evaluate(written, collection.qrels, list(metrics["teacher"])).mean)
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["first_stage"] == metrics["first_stage"]


def test_the_feedback_probe_moves_each_query_towards_its_top_documents(workdir: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture) -> None:
    import numpy as np
    import torch

    from rerank.data.trec import top_k
    from rerank.evaluation.measures import evaluate
    from rerank.teacher.scores import bi_encoder_scores, blend

    probe = runpy.run_path(str(script_path("probe_teacher_feedback.py")))
    generator = np.random.default_rng(0)
    vectors = {name: generator.normal(size=4) for name in ("q", "a", "b", "c")}
    by_query = {"1": torch.tensor(vectors["q"])}
    by_doc = {doc: torch.tensor(vectors[doc]) for doc in "abc"}
    candidates, ranking = {"1": dict.fromkeys("abc", 0.0)}, {"1": {"a": 0.1, "b": 0.9, "c": 0.5}}
    scores = probe["feedback_scores"](by_query, by_doc, candidates, ranking, 2, 0.3)
    moved = 0.7 * vectors["q"] + 0.3 * (vectors["b"] + vectors["c"]) / 2  # by hand: the top 2 of the ranking
    moved /= np.linalg.norm(moved)
    assert [scores["1"][doc] for doc in "abc"] == pytest.approx([moved @ vectors[doc] for doc in "abc"], abs=1e-9)

    monkeypatch.setenv("RERANK_CACHE", str(tmp_path / "cache"))
    model = tiny_bi_encoder(tmp_path)
    probe["main"](["--data.collection", json.dumps(CRANFIELD), "--run", str(workdir / "bm25.run"), "--depth", "10",
                   "--bi_encoder", str(model), "--max_length", "64", "--feedback_depths", "[2]",
                   "--feedback_weights", "[0.5]"])
    printed = " ".join(capsys.readouterr().out.split())
    collection = Collection(CollectionConfig(**CRANFIELD))
    candidates = {qid: docs for qid, docs in top_k(read_run(workdir / "bm25.run"), 10).items()
                  if qid in collection.qrels}
    bi = bi_encoder_scores(candidates, collection.queries, collection.documents, str(model), 64)
    references = [evaluate(run, collection.qrels, ["nDCG@10"]).mean["nDCG@10"]
                  for run in (candidates, bi, blend(bi, candidates, 0.4))]
    assert (f"first stage {references[0]:.4f}, bi-encoder {references[1]:.4f}, ensemble (w = 0.4) "
            f"{references[2]:.4f}") in printed
    assert all(f"{ranking} │ 2 │ 0.5 │" in printed for ranking in ("bi-encoder", "ensemble", "first stage"))
    with pytest.raises(ValueError, match=r"--feedback_depths must be positive .*got \[0\]"):
        probe["main"](["--data.collection", json.dumps(CRANFIELD), "--run", str(workdir / "bm25.run"),
                       "--feedback_depths", "[0]"])
