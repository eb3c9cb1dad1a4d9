"""Conformance checks of a site's real DP-SGD steps against what its accountant assumes:
what the site observed of its steps (:mod:`.observed_steps`), the distributions of the checks'
statistics under honest DP-SGD (:mod:`.distributions`) and the checks themselves
(:mod:`.checks`). Numbers in, pass/fail out: numpy and scipy only, no torch."""
