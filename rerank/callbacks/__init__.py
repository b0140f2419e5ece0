"""The Lightning callbacks of a fit: validation, testing and the ranker's choice (:mod:`.evaluator`), the predictions'
writer (:mod:`.prediction_writer`), progress (:mod:`.progress`) and stopping on a signal at a saved state
(:mod:`.resumable`)."""
