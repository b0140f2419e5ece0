"""The deployed ranker: which ranker a fit deploys and how it scores (:mod:`.deployment`), its choice on validation
(:mod:`.selection`) and the memo of the teacher's embeddings that a deployed ``fused`` ranker keeps (:mod:`.memo`)."""
