"""The lowest floor: crash-safe writes (:mod:`.atomic`), the cache folder (:mod:`.cache`), the one range check
(:mod:`.checks`), the user's errors (:mod:`.errors`), logging (:mod:`.logs`), stopping on a signal (:mod:`.preemption`),
figures as files (:mod:`.figures`) and the layout of what the commands write (:mod:`.run_directory`)."""
