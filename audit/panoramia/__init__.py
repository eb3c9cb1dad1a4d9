"""PANORAMIA's pipeline (:mod:`.pipeline`) and its stages: splits, the component interfaces
and registries the modalities plug into, reference-model calibration, the game and its two
sides, the repeats, the comparisons on real non-members, assembly and diagnosis."""
