"""The canary audits, one per kind of canary, each named for its kind throughout: input
canaries, made-up records a site trains on by a coin (:mod:`.input_canaries`); canary
clients, virtual clients beside the sites (:mod:`.client_canaries`); gradient canaries,
phantom records inside a site's DP-SGD (:mod:`.gradient_canaries`)."""
