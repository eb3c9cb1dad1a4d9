"""What a run directory may be continued under: nothing that was already trained changes.

A resumed run continues the rounds, checkpoints and audits on disk. An override may change
how the rest runs (``resources.*``, ``ray.*``, the audit settings ``audit.*``, ``name``,
``output_dir``) or extend ``fl.rounds``; a key that shaped the sites' data, the model or the
rounds already trained is refused, naming the key and why, before anything on disk changes.
The same rule holds for every way into an existing run directory (``run --resume``, a sweep
point run again, deployment preparation): :func:`check_same_run`. A changed ``audit.*``
means the audits on disk answer another question: they are set aside and redone.
"""

from __future__ import annotations

from typing import Any

from panoramia_fl.contracts.checkpoint import latest_round_checkpoint, readable_checkpoint
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.simulations.experiment_config import ConfigError, ExperimentConfig


class RunConfigMismatchError(ConfigError):
    """A run directory holds a run under another config than the one asked for (the message
    names each key that differs, its two values and why it may not change)."""


RESUMABLE = ("name", "output_dir", "resources", "ray", "audit")
"""Top-level keys (and sections) a resumed run may change."""

_TRAINED = {
    "plugins": "the run's models and data were looked up with these modules imported",
    "seed": "it seeded the training and the sites' data files (and drew the partition "
    "unless partition.seed is set)",
    "data": "the sites' data files were cut from this dataset",
    "partition": "the sites' data files were cut by this partition",
    "model": "the checkpoints hold this model",
    "fl": "the rounds already trained used it",
    "dp": "the rounds already trained, and their privacy ledgers, used it",
}
_INPUT_CANARIES = "audit.input_canaries"
_CANARY_CLIENTS = "audit.canary_clients"
_ALLOWED = (
    "resources.*, ray.*, audit.* (but audit.input_canaries and audit.canary_clients), name, "
    "output_dir, and fl.rounds no lower than the rounds done"
)


def rounds_done(layout: RunLayout) -> int:
    """The last round with a checkpoint (or of the final model), 0 when none."""
    done = 0
    latest = latest_round_checkpoint(layout)
    if latest is not None:
        done = latest.round
    final = readable_checkpoint(layout.final_model)
    if final is not None:
        done = max(done, final.round)
    return done


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_leaves(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): node}


def changed_keys(old: ExperimentConfig, new: ExperimentConfig) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (old value, new value) for every leaf that differs."""
    a, b = _leaves(old.model_dump(mode="json")), _leaves(new.model_dump(mode="json"))
    return {k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def _refusal(key: str, old: ExperimentConfig, new: ExperimentConfig, done: int) -> str | None:
    """Why ``key`` may not change on resume, or ``None`` when it may."""
    top = key.split(".", 1)[0]
    if key == _INPUT_CANARIES or key.startswith(_INPUT_CANARIES + "."):
        return "the input canaries are in the sites' data files and were trained on"
    if key == _CANARY_CLIENTS:
        return "the canary clients were averaged into the rounds already trained"
    if top in RESUMABLE:
        return None
    if key == "fl.rounds":
        if new.fl.rounds < done:
            return f"{done} rounds are already trained; fl.rounds must be at least {done}"
        dp = old.dp
        if (dp.record_level and dp.target_epsilon is not None) or (
            dp.client_level and dp.client.target_epsilon is not None
        ):
            return (
                "the DP noise of the rounds already trained was calibrated to the target "
                f"epsilon over fl.rounds={old.fl.rounds}"
            )
        return None
    return _TRAINED.get(top, "the rounds already trained used it")


def _named(leaf: str, overrides: list[str]) -> str:
    """The ``--set`` key that changed ``leaf`` (the leaf itself when none did)."""
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if leaf == key or leaf.startswith(key + ".") or key.startswith(leaf + "."):
            return key
    return leaf


def _refused(
    old: ExperimentConfig, new: ExperimentConfig, overrides: list[str], layout: RunLayout
) -> str | None:
    """The changes ``new`` may not make to ``layout``'s run (key, values, why), or None."""
    changes = changed_keys(old, new)
    if not changes:
        return None
    done = rounds_done(layout)
    refused: dict[str, list[str]] = {}
    for leaf, (before, after) in changes.items():
        why = _refusal(leaf, old, new, done)
        if why is not None:
            key = _named(leaf, overrides)
            what = "" if leaf == key else f"{leaf} "
            refused.setdefault(key, []).append(f"{what}{before!r} -> {after!r}: {why}")
    if not refused:
        return None
    return "; ".join(f"{key} ({'; '.join(whys)})" for key, whys in refused.items())


def check_resume(
    old: ExperimentConfig, new: ExperimentConfig, overrides: list[str], layout: RunLayout
) -> None:
    """Raise :class:`RunConfigMismatchError` when ``new`` changes what ``layout``'s run
    already trained."""
    lines = _refused(old, new, overrides, layout)
    if lines is not None:
        raise RunConfigMismatchError(
            f"--resume {layout.root}: cannot change {lines}. A resumed run keeps what was "
            f"already trained: it may change only {_ALLOWED}; start a new run (another --out) "
            "to change the rest"
        )


def check_same_run(old: ExperimentConfig, new: ExperimentConfig, layout: RunLayout) -> None:
    """Raise :class:`RunConfigMismatchError` when ``layout`` (holding a run of ``old``)
    cannot continue as a run of ``new``: field by field, the same rule as ``--resume``."""
    lines = _refused(old, new, [], layout)
    if lines is not None:
        raise RunConfigMismatchError(
            f"{layout.root} already holds a run whose config differs: {lines}. Its results "
            f"would mix with the new config's; only {_ALLOWED} may differ. Use another run "
            "directory (another name, --out or sweep folder) or remove this one"
        )


def audit_changed(old: ExperimentConfig, new: ExperimentConfig) -> list[str]:
    """The ``audit.*`` keys that differ (the audits on disk answer another question).

    ``audit.rounds`` and ``audit.every`` only say which checkpoints to audit: the audits
    on disk stay valid, and a resumed run audits the rounds they lack."""
    return [
        k
        for k in changed_keys(old, new)
        if (k == "audit" or k.startswith("audit.")) and k not in ROUND_SELECTION_KEYS
    ]


ROUND_SELECTION_KEYS = frozenset({"audit.rounds", "audit.every"})
