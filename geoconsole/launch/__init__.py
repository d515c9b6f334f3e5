"""Launching a rank map: the plan (:mod:`.plan`), running it over SSH (:mod:`.run`,
:mod:`.flow`), exports for other launchers (:mod:`.export`) and validation (:mod:`.validate`)."""
