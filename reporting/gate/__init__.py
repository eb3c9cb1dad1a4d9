"""The release gate: a policy, its verdict on a run's sites or a sweep's points, the verdict as a
section."""
