"""The canary audits, one per kind of canary: records a site trains on by a coin
(:mod:`.canary`), canary clients beside the sites (:mod:`.client_canaries`) and gradient
canaries inside a site's DP-SGD (:mod:`.gradient_canaries`)."""
