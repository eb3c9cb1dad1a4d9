"""The statistics under every audit: the game's bounds (:mod:`.bounds`), the one-run bounds
(O(1) by Steinke et al., :mod:`.o1`; the f-DP reading, :mod:`.one_run`) and ROC summaries
(:mod:`.roc`). Numbers in, bounds out: no model, no records."""
