"""What a collection reads its documents, queries and judgments from: :class:`Source`, one kind per origin
(:mod:`.ir_datasets_source`, :mod:`.local_source`)."""

from __future__ import annotations

from collections.abc import Mapping

from .collection_config import CollectionConfig
from .documents import Documents
from .trec import Qrels


class Source:
    def __init__(self, config: CollectionConfig) -> None:
        self.config = config

    def documents(self) -> Documents:
        raise NotImplementedError

    def queries(self) -> dict[str, str]:
        raise NotImplementedError

    def qrels(self) -> Qrels:
        raise NotImplementedError

    def has_qrels(self) -> bool:
        raise NotImplementedError

    def query_text(self, fields: Mapping[str, str], where: str) -> str:
        """The query text from a record's fields, by ``query_template`` or ``query_field``."""
        config = self.config
        if config.query_template:
            try:
                return " ".join(config.query_template.format(**fields).split())
            except KeyError as missing:
                raise ValueError(
                    f"collection.query_template {config.query_template!r} names field {missing} that {where} "
                    f"lacks; fields: {', '.join(fields)}"
                ) from None
        if "text" in fields and config.query_field not in fields:
            return " ".join(fields["text"].split())
        if config.query_field not in fields:
            raise ValueError(f"collection.query_field {config.query_field!r}: {where} has fields {', '.join(fields)}")
        return " ".join(fields[config.query_field].split())
