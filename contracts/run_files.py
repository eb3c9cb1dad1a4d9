"""A run directory: where each file lives (:class:`RunLayout`) and the format of a
checkpoint's description (:class:`CheckpointMeta`); a site's audit file is
:class:`contracts.site_audit.SiteAuditFile`.

Every writer and reader takes its paths from :class:`RunLayout`; the names below never
change, so old run directories still resume and report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

CONFIG_FILE = "config.yaml"
"""The resolved experiment config (written by the harness, read by the report)."""
CONFIG_DIGEST_FILE = "config.sha256"
"""The digest of ``config.yaml``'s settings, beside it: an edit of ``config.yaml`` (its own
digest line removed too) no longer matches it."""
PARTITION_FILE = "partition.json"
"""Site sizes and label histograms (the harness, or the server from the sites' replies)."""
DATASET_FILE = "dataset.json"
"""What the apps need to know about the data without loading it (written last)."""
METRICS_FILE = "metrics.jsonl"
"""The server's per-round log."""
AUDITS_DIR = "audits"
"""The server's per-site audit files (:class:`contracts.site_audit.SiteAuditFile`)."""
CHECKPOINTS_DIR = "checkpoints"
FINAL_MODEL_FILE = "global_model.pt"
CLIENT_DP_FILE = "client_dp.json"
"""The server's client-level DP accounting (``server.client_dp``), read by the report."""
CLIENT_CANARIES_FILE = "client_canaries.json"
"""What the canary clients measured (``server.canary_clients``), read by the report."""
SITES_DIR = "sites"
"""Simulated sites' data files and the public split."""
SITE_STATE_DIR = "site_state"
"""Simulated sites' own files (site-local in a real deployment; the server never reads them)."""
SERVER_HELD_DIR = "server_held"
"""What a dishonest server (``fl.adversary``, simulations only) held of the sites it attacked,
one file a round (``server.adversary``): its own state, kept so a resumed run reports it."""
REFERENCE_MODELS_DIR = "reference_models"
"""The run's shared reference models (public records only) and their manifest."""
DEPLOYMENT_DIR = "deployment"
"""``flwr run``'s app folder, run config and logs."""
CANARY_CLIENT_TWIN_DIR = "no-canary-twin"
"""The run trained again without its canary clients (``audit.canary_clients``)."""
NOISE_FILE = "noise.json"
"""Where the run's DP randomness came from (:data:`NoiseSource`), written by the server."""

LOCK_FILE = "run.lock"
"""Held (an OS lock on the open file) by the process that runs in the directory; the OS
drops it when that process ends, however it ends."""

PLATFORM_FILE = "platform.json"
"""The machine that trained the run (``contracts.run_log.PlatformInfo``), written by the
harness when it trains; read by a site report's manifest."""
REPLICATES_FILE = "replicates.json"
"""A replicate set's report, in the folder that holds its runs (:func:`replicate_run_dir`)."""
REPLICATES_MD = "replicates.md"
REPLICATES_HTML = "replicates.html"

REPORT_JSON = "report.json"
"""The run's report (``reporting``): every number, with its interval, ceiling and flags."""
REPORT_CSV = "report.csv"
"""The report's site table, one row per site."""
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
EVIDENCE_PDF = "evidence.pdf"
"""The consortium's evidence pack (``report --pdf``); a site's is ``site-reports/site-<id>.pdf``."""
LEDGER_CSV = "ledger.csv"
"""The run's privacy ledger, one row per site and guarantee."""
SITE_REPORTS_DIR = "site-reports"
"""Each audited site's own report (``site-<id>.json`` / ``.html``)."""

NoiseSource = Literal["seeded", "os-entropy"]
"""``seeded``: from the run's seed (simulation, reproducible); ``os-entropy``: each site and
the server seed their noise from the operating system's entropy (a real deployment)."""
NOISE_NOTES: dict[str, str] = {
    "seeded": "noise seeded for reproducibility: a simulation, not a guarantee against "
    "anyone who knows the seed",
    "os-entropy": "noise drawn from each site's and the server's OS entropy, never from the "
    "run config: nobody, the server included, can replay it",
}
"""The one line the report and the ledgers say about the DP noise of each source."""

_ROUND_CHECKPOINT = re.compile(r"^round-(\d+)\.pt$")
_AUDIT_FILE = re.compile(r"^site-(-?\d+)\.json$")


def site_accountant_history_name(site_id: int) -> str:
    """The site's DP-SGD accountant history, in its state directory (the file kept the name
    it had when the history was called a ledger, so older runs still resume)."""
    return f"site-{site_id}-dp-ledger.json"


def gradient_canaries_name(site_id: int) -> str:
    """The site's gradient canaries: coins and statistics (``audit.gradient_canaries``), in
    its state directory."""
    return f"site-{site_id}-gradient-canaries.npz"


def inversion_state_name(site_id: int, server_round: int) -> str:
    """What the site keeps of one round for its gradient-inversion audit
    (``audit.inversion``): the global weights it received, its update and the records its
    steps used, in its state directory; never sent."""
    return f"site-{site_id}-inversion-round-{server_round}.pt"


def used_records_name(site_id: int, server_round: int) -> str:
    """The records a site's steps used in a round a dishonest server (``fl.adversary``)
    attacked it, kept in its state directory to score what that server rebuilt; never sent."""
    return f"site-{site_id}-used-records-round-{server_round}.pt"


def local_model_name(site_id: int, server_round: int) -> str:
    """The site's local model of one round, the weights it sent (``audit.updates``), kept
    in its state directory for its audit of its own update; never sent again."""
    return f"site-{site_id}-local-model-round-{server_round}.pt"


def inversion_gallery_name(site_id: int) -> str:
    """The site's gallery of its records beside their reconstructions (a PNG), in its
    state directory; the site's report only links it, never reads it."""
    return f"site-{site_id}-inversion.png"


def rebuilt_gallery_name(site_id: int) -> str:
    """The site's thumbnails of its records beside what a dishonest server (``fl.adversary``)
    rebuilt of them (a PNG), in its state directory; the site's report only links it."""
    return f"site-{site_id}-dishonest-server.png"


def secure_sum_state_name(site_id: int) -> str:
    """What a site keeps between the two steps of a secure sum (``fl.secure_aggregation``):
    its update of the round and its private key, in its state directory; never sent, and
    removed once its masked update has left."""
    return f"site-{site_id}-secure-sum.pt"


def exposed_records_name(site_id: int) -> str:
    """The site's most exposed members (``audit.exposed_records``), in its state directory.

    Written by the site; the site's report only links it, never reads it.
    """
    return f"site-{site_id}-exposed-records.json"


def model_checks_name(site_id: int) -> str:
    """The site's log of its checks of each received model (``clients.model_checks``,
    :class:`contracts.model_flags.CheckRecord` lines), in its state directory."""
    return f"site-{site_id}-model-checks.jsonl"


def site_refusals_name(site_id: int) -> str:
    """The site's log of what its policy refused (``clients.site_policy``), in its state
    directory; never sent to the server."""
    return f"site-{site_id}-refusals.jsonl"


def replicate_run_dir(set_dir: Path, seed: int) -> Path:
    """``<set>/seed-<seed>``: one run of a replicate set (the same config, another seed)."""
    return Path(set_dir) / f"seed-{seed}"


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def config_digest(self) -> Path:
        return self.root / CONFIG_DIGEST_FILE

    @property
    def partition(self) -> Path:
        return self.root / PARTITION_FILE

    @property
    def dataset(self) -> Path:
        return self.root / DATASET_FILE

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_FILE

    @property
    def audits(self) -> Path:
        return self.root / AUDITS_DIR

    def audit(self, site_id: int) -> Path:
        """``audits/site-<id>.json``."""
        return self.audits / f"site-{site_id}.json"

    def audit_files(self) -> dict[int, Path]:
        """The site audit files present, by site id."""
        found: dict[int, Path] = {}
        if self.audits.is_dir():
            for path in sorted(self.audits.iterdir()):
                if match := _AUDIT_FILE.match(path.name):
                    found[int(match.group(1))] = path
        return found

    def superseded_audits(self) -> Path:
        """A fresh ``audits-superseded-<k>`` folder name: where audits of settings a run
        no longer has are kept (never read by the report)."""
        k = 1
        while (path := self.root / f"{AUDITS_DIR}-superseded-{k}").exists():
            k += 1
        return path

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS_DIR

    def round_checkpoint(self, server_round: int) -> Path:
        """``checkpoints/round-XXXX.pt``: the global model after a (global) round."""
        return self.checkpoints / f"round-{server_round:04d}.pt"

    def round_checkpoints(self) -> dict[int, Path]:
        """The round checkpoints present, by round."""
        found: dict[int, Path] = {}
        for path in self.checkpoints.glob("round-*.pt"):
            if match := _ROUND_CHECKPOINT.match(path.name):
                found[int(match.group(1))] = path
        return found

    @property
    def final_model(self) -> Path:
        return self.root / FINAL_MODEL_FILE

    @property
    def client_dp_accounting(self) -> Path:
        return self.root / CLIENT_DP_FILE

    @property
    def client_canaries(self) -> Path:
        return self.root / CLIENT_CANARIES_FILE

    @property
    def canary_client_twin(self) -> Path:
        """The same run without its canary clients (the canaries' accuracy cost)."""
        return self.root / CANARY_CLIENT_TWIN_DIR

    @property
    def twin(self) -> RunLayout:
        """The run directory of :attr:`canary_client_twin`."""
        return RunLayout(self.canary_client_twin)

    @property
    def sites(self) -> Path:
        return self.root / SITES_DIR

    def site_file(self, site_id: int) -> Path:
        """``sites/site-<id>.npz``: a simulated site's data."""
        return self.sites / f"site-{site_id}.npz"

    @property
    def public(self) -> Path:
        """``sites/public.npz``: the public split (central evaluation, reference pool)."""
        return self.sites / "public.npz"

    @property
    def site_state(self) -> Path:
        return self.root / SITE_STATE_DIR

    def server_held(self, server_round: int) -> Path:
        """``server_held/round-XXXX.pt``: what a dishonest server held of a (global) round."""
        return self.root / SERVER_HELD_DIR / f"round-{server_round:04d}.pt"

    @property
    def bulletin(self) -> Path:
        """``bulletin/``: the digests of each round's model as the sites published them
        (``clients.model_checks``; written by sites only, read by sites)."""
        return self.root / "bulletin"

    def site_accountant_history(self, site_id: int) -> Path:
        return self.site_state / site_accountant_history_name(site_id)

    def exposed_records(self, site_id: int) -> Path:
        return self.site_state / exposed_records_name(site_id)

    @property
    def reference_models(self) -> Path:
        return self.root / REFERENCE_MODELS_DIR

    @property
    def reference_manifest(self) -> Path:
        """Written last: without it the reference models are (re)trained."""
        return self.reference_models / "manifest.json"

    def reference_model(self, k: int) -> Path:
        return self.reference_models / f"ref-{k}.pt"

    @property
    def deployment(self) -> Path:
        return self.root / DEPLOYMENT_DIR

    @property
    def noise(self) -> Path:
        return self.root / NOISE_FILE

    @property
    def platform(self) -> Path:
        return self.root / PLATFORM_FILE

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILE

    @property
    def report_json(self) -> Path:
        return self.root / REPORT_JSON

    @property
    def report_csv(self) -> Path:
        return self.root / REPORT_CSV

    @property
    def report_md(self) -> Path:
        return self.root / REPORT_MD

    @property
    def report_html(self) -> Path:
        return self.root / REPORT_HTML

    @property
    def evidence_pdf(self) -> Path:
        return self.root / EVIDENCE_PDF

    @property
    def ledger_csv(self) -> Path:
        return self.root / LEDGER_CSV

    @property
    def site_reports(self) -> Path:
        return self.root / SITE_REPORTS_DIR

    @property
    def replicates(self) -> Path:
        """The report of the replicate set the run may belong to (beside its folder)."""
        return self.root.parent / REPLICATES_FILE


@dataclass(frozen=True, kw_only=True)
class CheckpointMeta:
    """What a checkpoint needs to rebuild its model without the run's config (written by
    :func:`~contracts.json_values.json_safe`, read by :func:`~contracts.json_values.from_dict`)."""

    modality: str
    model: str
    """The registered model name."""
    model_options: dict[str, Any] = field(default_factory=dict)
    num_classes: int
    input_shape: tuple[int, ...]
    dp: bool = False
    """Trained under some DP level (the model has no BatchNorm)."""
    dp_level: str | None = None
    """``none`` / ``record`` / ``client`` / ``both``; None in checkpoints older than it."""
