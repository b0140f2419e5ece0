"""A collection from local files: documents in JSONL or TSV (:mod:`.arrow_documents`), queries in TSV or as TREC
topics, TREC qrels; a query without text refused, naming its file and line."""

from __future__ import annotations

from pathlib import Path

from .arrow_documents import ArrowDocuments
from .documents import Documents
from .lines import check_id, read_text, tab_separated, text_lines
from .source import Source
from .trec import Qrels, read_qrels


class LocalSource(Source):
    """A collection from local files."""

    def _path(self, name: str) -> Path:
        value = getattr(self.config, name)
        if not value:
            raise ValueError(f"collection.{name}: no file given")
        path = Path(value)
        if not path.is_file():
            raise FileNotFoundError(f"collection.{name}: {path} does not exist")
        return path

    def documents(self) -> Documents:
        return ArrowDocuments(self._path("docs"), self.config.cache_dir)

    def queries(self) -> dict[str, str]:
        path = self._path("queries")
        if _looks_like_trec_topics(path):
            from ir_datasets.formats import TrecQueries
            from ir_datasets.util import LocalDownload

            topics = TrecQueries(LocalDownload(path), namespace="local", lang="en")
            return {check_id(q.query_id, "query id", f"{path}, topic {q.query_id!r}"):
                    _with_text(self.query_text(q._asdict(), f"{path} topic {q.query_id}"), q.query_id,
                               f"{path}, topic {q.query_id!r}") for q in topics.queries_iter()}
        queries = {}
        for number, line in text_lines(path):
            row = tab_separated(line)
            if not row:
                continue
            if len(row) < 2:
                raise ValueError(f"{path}:{number}: expected query_id<TAB>text, got {line.rstrip()!r}")
            qid = check_id(row[0], "query id", f"{path}:{number}")
            if qid in queries:
                raise ValueError(f"{path}:{number}: duplicate query id {qid!r}")
            queries[qid] = _with_text(self.query_text({"text": row[-1]}, f"{path}:{number}"), qid, f"{path}:{number}")
        if not queries:
            raise ValueError(f"{path}: no queries (expected lines query_id<TAB>text, or TREC <top> topics)")
        return queries

    def has_qrels(self) -> bool:
        return bool(self.config.qrels)

    def qrels(self) -> Qrels:
        qrels = read_qrels(self._path("qrels"), self.config.label_map, self.config.binarize_at)
        if not qrels:
            raise ValueError(f"{self.config.qrels}: no judgments (expected lines query_id 0 doc_id relevance)")
        return qrels



def _with_text(text: str, query_id: str, where: str) -> str:
    """``text``, or a ValueError naming ``where`` (the file and line) when a query of a local file has none."""
    if not text:
        raise ValueError(f"{where}: query {query_id!r} has no text (after the query field or template is read); "
                         "give it one, or leave the line out")
    return text


def _looks_like_trec_topics(path: Path) -> bool:
    """Whether ``path`` holds TREC ``<top>`` blocks (the whole file is read: a byte that is not UTF-8 is named)."""
    return "<top>" in read_text(path)
