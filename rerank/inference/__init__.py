"""A trained model at work: re-ranking from Python (:mod:`.reranker`), the exported folder (:mod:`.export`), the HTTP
server (:mod:`.serving`) and PyTerrier (:mod:`.pyterrier`)."""
