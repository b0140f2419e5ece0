"""Measuring runs and combining them: trec_eval's measures by their ir_measures names (:mod:`.measures`) and score
fusion, z-normalised CombSUM (:mod:`.fusion`)."""
