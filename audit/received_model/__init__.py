"""Checks a site runs on the model it receives, before it trains (a server that does not play
fair sends crafted weights: ``docs/model_checks.md``).

- :mod:`.consistency`: every site of the round received the same weights (digests the sites
  publish to a bulletin the server cannot rewrite);
- :mod:`.plausibility`: the move from the previous global model is one the agreed training
  can make (Adam's per-step bound, or client-level DP's clipping norm and noise);
- :mod:`.structure`: the first ReLU layer on the site's own records (units active for one
  record in a batch, repeated weight rows, units dead on every record);
- :mod:`.thresholds`: each check's threshold and the range honest models read.

Each check returns a :class:`contracts.model_flags.CheckOutcome`; no Flower here.
"""
