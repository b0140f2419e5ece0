"""Teacher scores: soft targets over every candidate, from a run or a bi-encoder (:mod:`.scores`)."""
