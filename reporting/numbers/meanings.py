"""What the report's numbers and flags mean, and why they are caveated: every such sentence a
reader sees, written once here and looked up by key (:class:`Note`; a flag's sentences are
in :mod:`.flag_prose`).

The audit library's own statements of what eps_tilde and its two-sided game mean
(:data:`audit.result.EPS_TILDE_MEANING`, :data:`audit.result.TWO_SIDED_MEANING`) stay with
the audit, which returns them in every result (``PanoramiaResult.meaning``) to callers without a
report; the report reads them through :data:`NOTES` like every other sentence. The line on
how the DP noise was drawn (``contracts.run_files.NOISE_NOTES``) stays in contracts too: the
server writes it into its ledger and ``noise.json``; the report looks it up by the source
noise.json names.
"""

from __future__ import annotations

from enum import Enum

from panoramia_fl.audit.config import ONE_SIDED_SHARES, TWO_SIDED_SHARES
from panoramia_fl.audit.panoramia.diagnosis import NOT_TIGHT_TOLERANCE
from panoramia_fl.audit.result import EPS_TILDE_MEANING, TWO_SIDED_MEANING
from panoramia_fl.audit.tabular.attribute_result import ATTRIBUTE_INFERENCE_MEANING
from panoramia_fl.contracts.reply_keys import DECLARED_SIZE_ADJACENCY

from .flag_prose import FLAG_PROSE


class Note(Enum):
    """The key of one sentence (or caption, legend, template) of :data:`NOTES`."""

    EPS_TILDE = "eps_tilde"
    """The audit's own statement of what eps_tilde means (report.json's ``meaning``)."""
    TWO_SIDED = "two_sided"
    """The audit's statement of the two-sided game (report.json's ``two_sided_meaning``)."""
    TIGHT_ONLY = "tight_only"
    """The caveat every place that shows eps_tilde repeats."""
    NOT_A_BOUND = "not_a_bound"
    ABOVE_LABEL = "above_label"
    """The badge and flag of eps_tilde above the guarantee (never a violation)."""
    EPS_TILDE_ABOVE = "eps_tilde_above"
    """Why eps_tilde above the accountant's epsilon is a flag, not a violation."""
    ONE_MODEL_INTERVAL = "one_model_interval"
    HEADLINE = "headline"
    BOUNDS_BELOW_DP = "bounds_below_dp"
    LEDGER_INTRO = "ledger_intro"
    SECURE_SUM = "secure_sum"
    """What the ledger says of a run under ``fl.secure_aggregation: ideal``."""
    ROW_COLOURS = "row_colours"
    """The per-site table's legend in HTML (its rows are coloured by ``site_row_class``)."""
    FLAG_LEGEND = "flag_legend"
    EPS_PLOT_CAPTION = "eps_plot_caption"
    ROC = "roc"
    PR_CAPTION = "pr_caption"
    BOUND_RECALL_CAPTION = "bound_recall_caption"
    LOW_FPR = "low_fpr"
    BY_ROUND = "by_round"
    BY_ROUND_CAPTION = "by_round_caption"
    UPDATES = "updates"
    UPDATES_CAPTION = "updates_caption"
    FIRST_LEAK = "first_leak"
    TOO_FEW_FOR_CLASS = "too_few_for_class"
    """A class whose slots let even a perfect attack reach no useful bound."""
    INVERSION = "inversion"
    ATTRIBUTE_INFERENCE = "attribute_inference"
    """The audit's statement of its attribute-inference game (audit.attribute_inference)."""
    DISHONEST_SERVER = "dishonest_server"
    WHITE_BOX = "white_box"
    """What the white-box numbers mean, for every place that shows them."""
    OUTSIDE = "outside"
    CLIENT_CANARIES = "client_canaries"
    CANARY_CLIENTS_OUTNUMBER = "canaries_outnumber"
    """A template: ``canaries`` (mean canary clients a round) and ``sites`` (a round's)."""
    READ_AS_LOWER_BOUND = "read_as_lower_bound"
    ONE_RUN_BOUNDS = "one_run_bounds"
    DP_EPS = "dp_eps"
    SIDES = "sides"
    LEVELS = "levels"
    O1_ABOVE = "o1_above"
    THREAT_WHO = "threat_who"
    THREAT_WHAT = "threat_what"
    THREAT_NOT_COVERED = "threat_not_covered"
    INVERSION_THREAT = "inversion_threat"
    INVERSION_THREAT_SUM = "inversion_threat_sum"
    CLASS_SLICES = "class_slices"
    RECORD_GUARANTEE = "record_guarantee"
    RECORD_ACCOUNTANT = "record_accountant"
    CLIENT_ACCOUNTANT = "client_accountant"
    SERVER_GUARANTEE = "server_guarantee"
    CLIENT_IMPLIED_RECORD = "client_implied_record"
    INPUT_CANARY_BOUND = "canary_bound"
    INPUT_CANARY_FDP = "canary_fdp"
    WHITE_BOX_SERVER = "white_box_server"
    WHITE_BOX_COST = "white_box_cost"
    BEST_LOWER_BOUND = "best_lower_bound"
    DP_ACCOUNTANT = "dp_accountant"
    LOSS_GAP = "loss_gap"
    BETWEEN_RUNS = "between_runs"
    COMPARISONS = "comparisons"
    NOT_PROOF = "not_proof"
    LOWER_BOUND_WHEN = "lower_bound_when"
    NONMEMBER_SIDE = "nonmember_side"
    MEMBER_SIDE = "member_side"
    FLAGGED_READING = "flagged_reading"
    INCONCLUSIVE_READING = "inconclusive_reading"
    NO_LEAKAGE_READING = "no_leakage_reading"
    RECORDS_LISTED = "records_listed"
    RECORDS_NOT_LISTED = "records_not_listed"
    FAMILY_WISE = "family_wise"
    """A template: the consortium's statistical conformance checks (``scope``, ``checks``,
    ``sites``, ``chance``, ``beta``), before its flags' lines."""
    FLAG_SURVIVES = "flag_survives"
    """A template: a statistical flag that survives Holm (``where``, ``check``, ``p``)."""
    FLAG_BY_CHANCE = "flag_by_chance"
    """A template: a statistical flag that does not survive Holm (``where``, ``check``,
    ``p``, ``checks``)."""
    ONLY_CHANCE = "only_chance"
    """The banner's last line when every item is a flag consistent with chance."""
    PACK_INTRO = "pack_intro"
    """The evidence pack's opening: what it is and in which order it reads."""
    NO_POLICY = "no_policy"
    """The evidence pack's verdict section when the run names no release policy."""
    CANARY_THREAT = "canary_threat"
    CANARY_LIMITS = "canary_limits"
    WHITE_BOX_THREAT = "white_box_threat"
    WHITE_BOX_LIMITS = "white_box_limits"
    INVERSION_LIMITS = "inversion_limits"
    CLIENT_CANARY_THREAT = "client_canary_threat"
    ATTRIBUTE_THREAT = "attribute_threat"
    DISHONEST_THREAT = "dishonest_threat"
    DISHONEST_LIMITS = "dishonest_limits"
    ATTRIBUTE_LIMITS = "attribute_limits"
    NO_CONFORMANCE = "no_conformance"
    SECURE_AGGREGATION_IDEAL = "secure_aggregation_ideal"
    SECURE_AGGREGATION_NONE = "secure_aggregation_none"
    """What the design section says of a run without secure aggregation."""


_TIGHT_ONLY = "eps_tilde is a lower bound on epsilon only where c_lb is tight"
_NOT_A_BOUND = "eps_tilde is a measurement, not a bound"
_SECURE_IDEAL = (
    "ideal (the server held only each round's sum of the updates: a simulation of what a "
    "secure-aggregation protocol promises, docs/dp_settings.md)."
)
_ONE_MODEL_INTERVAL = (
    "Each 95% interval here is over audit repeats of this one trained model: another "
    "training run of the same config (another seed, or the same seed on another CPU) trains "
    "another model, whose number may fall outside it"
)
_BOUNDS_BELOW_DP = (
    "Every lower bound (canary, O(1), their f-DP readings, RM;RN) must be at most DP eps, "
    "the record-level guarantee that applies to the site's records (the canary clients' "
    "bound: at most the site-level client epsilon)"
)

NOTES: dict[Note, str] = {
    Note.EPS_TILDE: EPS_TILDE_MEANING,
    Note.TWO_SIDED: TWO_SIDED_MEANING,
    Note.ATTRIBUTE_INFERENCE: ATTRIBUTE_INFERENCE_MEANING,
    Note.TIGHT_ONLY: _TIGHT_ONLY,
    Note.NOT_A_BOUND: _NOT_A_BOUND,
    Note.ABOVE_LABEL: "eps_tilde above DP eps (not a bound)",
    Note.EPS_TILDE_ABOVE: "c_lb not tight; eps_tilde is a measurement, not a bound",
    Note.ONE_MODEL_INTERVAL: _ONE_MODEL_INTERVAL,
    Note.HEADLINE: (
        "eps_tilde two-sided: the larger side's leakage with its 95% interval; "
        f"{_TIGHT_ONLY}. O(1): a lower bound on epsilon from real records. "
        f"{_ONE_MODEL_INTERVAL}. The full tables follow."
    ),
    Note.BOUNDS_BELOW_DP: _BOUNDS_BELOW_DP,
    Note.LEDGER_INTRO: (
        "Each site's guarantees (accountant, delta) beside its measured lower bounds and "
        f"eps_tilde. {_BOUNDS_BELOW_DP}; {_NOT_A_BOUND}."
    ),
    Note.SECURE_SUM: f"; secure aggregation: {_SECURE_IDEAL}",
    Note.SECURE_AGGREGATION_IDEAL: _SECURE_IDEAL,
    Note.ROW_COLOURS: (
        "Row colours: yellow = saturated (eps_tilde reads headroom, not leakage); red = c_lb "
        "not tight (eps_tilde may overstate); grey = failed or missing audit; dark red border "
        "= a bound violation (see the banner at the top). Row colours and the badges beside "
        "eps_tilde are the one-sided game's; the badges beside the two-sided eps_tilde are its "
        "sides' (hover a row for the reasons)."
    ),
    Note.FLAG_LEGEND: (
        f"{_TIGHT_ONLY}; sites flagged saturated read headroom (ceiling - c_lb), not leakage; "
        "sites flagged c_lb not tight may overstate it. Flags are per game: the one-sided game "
        "and each side of the two-sided one."
    ),
    Note.EPS_PLOT_CAPTION: (
        "eps_tilde (one-sided) and eps_tilde two-sided with their 95% t-intervals over "
        "repeats; RM;RN and O(1) lower bounds beside them where the run had real non-members; "
        "grey bar: one-sided headroom ceiling - c_lb, the largest one-sided eps_tilde this "
        f"audit set can show. {_TIGHT_ONLY}."
    ),
    Note.ROC: (
        "True-positive rate against false-positive rate on log axes, mean over repeats: b "
        "(blue) and the MIA (red) in the privacy game (members against generated records), "
        "RM;RN (green) against real held-out non-members; dotted: chance (TPR = FPR). A curve "
        "far above the diagonal at the left exposes a few records with high confidence."
    ),
    Note.PR_CAPTION: (
        "Precision against recall of b (blue, no access to the model) and of the MIA (red, "
        "sees the target model) in the privacy game, one line per repeat."
    ),
    Note.BOUND_RECALL_CAPTION: (
        "The bound at each recall level: c for b (blue) and c+eps for the MIA (red); the "
        "dashed line is the ceiling, the bound of a perfect scorer."
    ),
    Note.LOW_FPR: (
        "TPR at 1% / 0.1% FPR: the fraction of members a scorer flags while flagging at most "
        "1% / 0.1% of the non-members (generated records for b and the MIA, real held-out "
        "records for RM;RN). It shows whether a few records are exposed with high confidence, "
        "which the AUC averages away."
    ),
    Note.BY_ROUND: (
        "Every round is audited with the same non-members, helper, reference models and "
        "games: only the model changes."
    ),
    Note.BY_ROUND_CAPTION: (
        "Two-sided eps_tilde per audited round (95% t-interval over repeats) and O(1), beside "
        "the global model's accuracy."
    ),
    Note.UPDATES: (
        "The site's own updates (the local model it sent the server in each chosen round) "
        "play the same games, with the same non-members, helper and reference models, as "
        "that round's global model: what the server could measure of the site's records, "
        "beside what anyone holding the global model could. Under record-level DP the update "
        "of round r is covered by the site's DP-SGD epsilon after round r (the last column): "
        "no lower bound of that round (RM;RN, O(1)) may exceed it; eps_tilde is a "
        "measurement, not a bound."
    ),
    Note.UPDATES_CAPTION: (
        "Two-sided eps_tilde (95% t-interval over repeats) and RM;RN of the site's update and "
        "of the global model per audited round, beside its DP-SGD epsilon after the round."
    ),
    Note.FIRST_LEAK: "first audited round whose two-sided eps_tilde interval excludes 0",
    Note.TOO_FEW_FOR_CLASS: "too few records for a bound",
    Note.INVERSION: (
        "the attack a curious server can run from what it holds (the global weights it sent, "
        "your update, your record count, the run's batch size, local epochs or steps and "
        "optimizer): dummy records optimised until their simulated update matches yours. "
        "Each of your records is scored against its best-matching reconstruction (SSIM for "
        "images, 1 = identical; the share of fields right for rows); the baseline is the same "
        "attack on an update from public records, so it reads what chance gives"
    ),
    Note.DISHONEST_SERVER: (
        "a simulated server that does not play fair (fl.adversary) chose the weights it sent "
        "you (the agreed architecture, crafted values) and decoded records from what it "
        "held: your update, or under secure aggregation the round's sum, which sending the "
        "other sites models whose update is zero (inconsistent) makes your update. Your site "
        "compared each row it rebuilt with the records your update came from (rows: every "
        "field within the tolerance; images: SSIM at least 0.9); the baseline is the same "
        "attack on an update from public records, chance. Only these shares left your site"
    ),
    Note.WHITE_BOX: (
        "what the server could learn about one of the site's records from what the site "
        "sends, measured white-box by gradient canaries inside the site's own DP-SGD: the "
        "one-run f-DP lower bound on epsilon / the Gaussian estimate [95% interval over the "
        "canaries]. Mechanism: every noisy gradient step (what the DP guarantee covers; the "
        "check that the DP setup does what the accountant assumes). Server: the round updates "
        "the site sends"
    ),
    Note.OUTSIDE: (
        "the keys of the site's train replies that its DP guarantee (record or client level) "
        "does not cover; a record-level guarantee covers the training given the site's "
        "declared size (its sampling rate, "
        "steps and divisor), and under the site's own member count that size is not covered: "
        f"{DECLARED_SIZE_ADJACENCY}. What covers every key a site sends: docs/security.md"
    ),
    Note.CLIENT_CANARIES: (
        "Canary clients (simulation only, docs/client_canaries.md): the estimate reads the "
        "client-level epsilon as a Gaussian mechanism (one pooled variance), with an "
        "approximate 95% interval; it is an estimate, not a bound. The two-variance fit is a "
        "sensitivity reading: with few canaries it drifts upwards. The lower bound must stay "
        "at or below the site-level client epsilon."
    ),
    Note.CANARY_CLIENTS_OUTNUMBER: (
        "The canaries outnumber the real sites ({canaries:.0f} canary clients against {sites} "
        "sites a round): the model measured is not the one this consortium trains without "
        "them."
    ),
    Note.READ_AS_LOWER_BOUND: (
        "Read eps_tilde as a lower bound on epsilon only when c_lb is tight; it is never an "
        "upper bound, and eps_tilde = 0 does not show that the model is private (the audit "
        "found no evidence, which a weak audit also finds)."
    ),
    Note.ONE_RUN_BOUNDS: (
        "RM;RN (real held-out non-members, c = 0) and O(1) (Steinke et al. 2023) are lower "
        "bounds on epsilon at the audit's level beta. DP eps is the accountant's epsilon, an "
        "upper bound under DP-SGD's assumptions; a lower bound above it would signal a bug."
    ),
    Note.DP_EPS: (
        "DP eps per site is the record-level guarantee that applies to its records: the "
        "smaller of the record-level accountant's (DP-SGD at the site) and the record-level "
        "epsilon that client-level DP implies (one record moves the site's clipped update by "
        "at most twice the clipping norm). Client-level DP's own epsilon is site-level: it "
        "covers adding or removing the whole site. Every measured lower bound (canary, O(1), "
        "RM;RN on either side) must stay at or below DP eps; eps_tilde may exceed it without "
        f"contradiction, as {_NOT_A_BOUND}."
    ),
    Note.SIDES: (
        "Each side of the two-sided game has its own c_lb, ceiling and flags (saturated, c_lb "
        "not tight against that side's RM;RN, RM;RN capped, above real non-members), "
        "diagnosed as above; side names the side whose eps_tilde is larger. The headline "
        "(two-sided eps_tilde) is diagnosed against RM;RN's two-sided reading too, with the "
        f"same {NOT_TIGHT_TOLERANCE} tolerance. The one-sided eps_tilde (the paper's) is "
        "reported unchanged beside it."
    ),
    Note.LEVELS: (
        f"Levels: the one-sided c_lb and {{c+eps}}_lb are each at beta/{ONE_SIDED_SHARES} (so "
        "eps_tilde holds at beta), as are RM;RN's two; the two-sided game's four bounds (b and "
        f"MIA on each side) are at beta/{TWO_SIDED_SHARES} each, as are RM;RN's two-sided "
        "ones; O(1) is at beta."
    ),
    Note.O1_ABOVE: (
        "O(1) > 0 with the one-sided eps_tilde = RM;RN = 0: O(1) also guesses 'non-member' "
        "(for records of high loss), while the one-sided PANORAMIA and RM;RN count only "
        "'member' guesses (the generator's closeness is one-sided, Definition 3). A model "
        "whose members and non-members are equally easy at the top of its confidence, but "
        "which fails on more non-members, leaks through its generalization gap (f loss: "
        "members vs holdout) without any member standing out; the two-sided values (side: "
        "non-member) and O(1) can read that."
    ),
    Note.THREAT_WHO: (
        "Who: anyone who holds the final shared model (every site of the consortium, and "
        "whoever the model is given to) and can run it on records of their choice."
    ),
    Note.THREAT_WHAT: (
        "What they try: to tell whether a given record of yours was used in training "
        "(membership inference), from how well the model fits that record, with look-alike "
        "records and models that never saw your data for comparison."
    ),
    Note.THREAT_NOT_COVERED: (
        "Not covered: attackers who watch the model updates exchanged during training, who "
        "collude with the server or other sites, or who try to rebuild records."
    ),
    Note.INVERSION_THREAT: (
        "Rebuilding records (audit.inversion, its own section): the server, which sees each "
        "of your updates with the weights it sent, tries to rebuild your records from them; "
        "your site ran that attack on its own updates and compared the result with its "
        "records."
    ),
    Note.INVERSION_THREAT_SUM: (
        "Rebuilding records (audit.inversion, its own section): the server, which under "
        "secure aggregation holds only each round's sum of the sites' updates, tries to "
        "rebuild your records from it; your site ran that attack on the round's sum and "
        "compared the result with its records."
    ),
    Note.NOT_PROOF: (
        "It is not proof of privacy: a reading of 0 means this audit found no evidence, and "
        "a weaker audit finds none either."
    ),
    Note.LOWER_BOUND_WHEN: (
        "It is a lower bound on the model's privacy loss (its DP epsilon) only when the "
        "baseline is as good as any attacker without the model can be; it is never an upper "
        "bound: a stronger attack could find more."
    ),
    Note.NONMEMBER_SIDE: (
        "The leakage is in 'not a member' guesses: the model fits your training records "
        "much more closely than similar records it never saw, so a record it fits badly is "
        "almost surely not in your data. Ruling people out of a small or known population "
        "also points at those who remain."
    ),
    Note.MEMBER_SIDE: (
        "The leakage is in 'member' guesses: for some of your records the model is "
        "confident enough to say correctly that they were used in training."
    ),
    Note.FLAGGED_READING: (
        "The number above does not measure how much the model leaks about your records (its "
        "flags below say why); read the cross-checks with your real records, RM;RN and "
        "O(1), instead."
    ),
    Note.INCONCLUSIVE_READING: (
        "The reading is too close to zero to say the model leaks; more repeats or a larger "
        "audit set could tell."
    ),
    Note.NO_LEAKAGE_READING: ("This audit measured no leakage about your records."),
    Note.RECORDS_LISTED: (
        "It does not say which of your records are exposed. Your site's own list of its "
        "most exposed records is linked below; it stays at your site."
    ),
    Note.RECORDS_NOT_LISTED: (
        "It does not say which of your records are exposed: per-record results never leave "
        "your site (set audit.exposed_records to keep a list of the most exposed ones "
        "there)."
    ),
    Note.CLASS_SLICES: (
        "Per-class slices replay the two-sided game on the slots of one label (the game pairs "
        "each member with a non-member of its label). Each class's four bounds are at the "
        "two-sided level divided by the number of labels (Bonferroni), so all classes' "
        "claims, the most exposed one's included, hold together at the audit's beta."
    ),
    Note.RECORD_GUARANTEE: (
        "the record-level epsilon that applies: the smaller of the record-level "
        "accountant's and the one client-level DP implies per record (an upper bound on how "
        "much any one of your records can change what the model reveals)"
    ),
    Note.RECORD_ACCOUNTANT: ("your site's own DP-SGD training, all rounds"),
    Note.CLIENT_ACCOUNTANT: (
        "the client-level noise on the aggregate (the server's, or the sites' own shares "
        "under distributed DP): covers adding or removing your whole site, against those "
        "who see the global model"
    ),
    Note.SERVER_GUARANTEE: (
        "what holds against the server itself: your DP-SGD's epsilon, or under distributed "
        "client-level DP the noise of your own share (of the whole sum, with secure "
        "aggregation); central client-level DP gives none (the server sees your update "
        "before its noise)"
    ),
    Note.CLIENT_IMPLIED_RECORD: (
        "the record-level epsilon client-level DP implies (one record moves your clipped "
        "update by at most twice the clipping norm)"
    ),
    Note.INPUT_CANARY_BOUND: (
        "canary records trained on by a fair coin each, guessed from the final model "
        "(Steinke et al. 2023, one run, delta = 0): a lower bound on epsilon"
    ),
    Note.INPUT_CANARY_FDP: (
        "the same guesses read against a Gaussian trade-off curve (Mahloujifar et al. "
        "2025): the largest Gaussian-DP mu they reject, as epsilon at delta"
    ),
    Note.WHITE_BOX_SERVER: (
        "the same canaries read from your round updates only (local steps hidden)"
    ),
    Note.WHITE_BOX_COST: (
        "gradient canaries inside your own DP-SGD (audit.gradient_canaries); the coins and "
        "statistics stay at your site"
    ),
    Note.BEST_LOWER_BOUND: (
        "the largest one-run lower bound (canary audit or O(1); Steinke et al. or f-DP), "
        "with the method that gave it"
    ),
    Note.DP_ACCOUNTANT: ("the training's record-level guarantee (an upper bound), if any"),
    Note.LOSS_GAP: (
        "the model's mean loss on its members and on held-out records (generalization gap)"
    ),
    Note.BETWEEN_RUNS: (
        "Mean: over the runs. Between-run 95% interval: where another training run of this "
        "config on the same data would read (a Student-t prediction interval over the "
        "runs). Mean's 95% interval: how well the runs pin the config's mean. Range: the "
        "lowest and highest run. Each run's own report gives intervals over audit repeats "
        "of its one trained model, which leave out the spread between training runs."
    ),
    Note.COMPARISONS: (
        "Each pair of neighbouring points is compared site by site on the two-sided "
        "eps_tilde by a paired t-test over the seeds both ran (seed k of one point against "
        "seed k of the other: the same data and start). The level is 0.05 over all the "
        "comparisons listed (Bonferroni). Few seeds give the test little power: 'no "
        "difference' is not evidence of equal leakage."
    ),
    Note.FAMILY_WISE: (
        "Across the {scope}: {checks} statistical conformance checks ran on {sites} DP-SGD "
        "sites, each at its site's own level; an honest consortium shows at least one such "
        "flag with probability {chance:.0%}. Each flag is read family-wise (Holm's correction "
        "at beta = {beta:g} over all {checks} checks)."
    ),
    Note.FLAG_SURVIVES: "{where}, {check} (p = {p}): survives: treat as a DP bug.",
    Note.FLAG_BY_CHANCE: (
        "{where}, {check} (p = {p}): does not survive: consistent with chance across "
        "{checks} checks; rerun the site's training with another seed, or check what its "
        "line above names (the step pair, the batches)."
    ),
    Note.ONLY_CHANCE: (
        "No flag survives the family-wise correction and nothing else is violated: the "
        "consortium's checks are consistent with honest DP-SGD. Each site's own page still "
        "reads its flag at the site's own level."
    ),
    Note.PACK_INTRO: (
        "This evidence pack records the privacy audits of a model trained across the "
        "consortium's sites, in the order a data protection impact assessment reads them: "
        "the verdict against the consortium's release policy, the attacks tried (who holds "
        "what, what each found, what it cannot show), the design choices that resist them, "
        "the risk that remains, and what it takes to reproduce every number."
    ),
    Note.NO_POLICY: (
        "The run names no release policy (report.policy in its config), so there is no "
        "verdict; check it against one with: panoramia-fl gate RUN_DIR --policy FILE."
    ),
    Note.CANARY_THREAT: (
        "Who: whoever holds the final shared model and knows the canary records your site "
        "planted (the audit plays this attacker). What they try: to tell which canaries, each "
        "kept or left out by a fair coin, the model trained on."
    ),
    Note.CANARY_LIMITS: (
        "Canaries are records made to stand out, so the bound speaks for the most exposed "
        "kind of record, and for a model that trained with them, which is not the one the "
        "consortium trains without them."
    ),
    Note.WHITE_BOX_THREAT: (
        "Who: the server, which receives what your site sends, or anyone who could watch "
        "every noisy step of your site's DP-SGD. What they try: to tell whether one record "
        "took part in training, from the gradients themselves."
    ),
    Note.WHITE_BOX_LIMITS: (
        "The canaries are gradients made to be found: the bound checks the DP mechanism as "
        "it ran against what its accountant assumes, and says little of how exposed your "
        "natural records are."
    ),
    Note.INVERSION_LIMITS: (
        "One attack with a fixed budget of steps: a stronger or longer attack could rebuild "
        "more. A record counts as rebuilt when its best reconstruction passes a similarity "
        "threshold, which is not the same as identical."
    ),
    Note.CLIENT_CANARY_THREAT: (
        "Who: whoever holds the global models of the rounds (every site, the server). What "
        "they try: to tell whether a whole site took part, from canary clients that join "
        "the rounds by a fair coin (simulation only)."
    ),
    Note.ATTRIBUTE_THREAT: (
        "Who: whoever may query the final shared model and knows every field of a patient's "
        "record but the sensitive one. What they try: to infer that field better for your "
        "members than for people the model never saw."
    ),
    Note.ATTRIBUTE_LIMITS: (
        "One attack (the model's likelihood of the label weighed by a public prior): a "
        "stronger attacker could infer more; a small advantage also bounds how much the "
        "model reveals of the field through membership, not what it reveals of everyone."
    ),
    Note.DISHONEST_THREAT: (
        "Who: a server that does not play fair (simulated: fl.adversary), choosing the "
        "weights it sends your site. What it tries: to read your records back exactly from "
        "your update, or from the round's sum when it sends the other sites dead models."
    ),
    Note.DISHONEST_LIMITS: (
        "Three named attacks, each with one decoding: a better-crafted model could rebuild "
        "more. A site whose checks refuse a crafted model trains nothing and sends nothing."
    ),
    Note.NO_CONFORMANCE: (
        "No conformance checks of the DP-SGD steps ran (they need record-level DP and "
        "audit.gradient_canaries)."
    ),
    Note.SECURE_AGGREGATION_NONE: (
        "none: the server received each site's update in the clear (what the white-box "
        "server level and the inversion audit attack)."
    ),
}
"""Every sentence of :class:`Note`, by key."""


THREAT_MODEL: tuple[Note, ...] = (Note.THREAT_WHO, Note.THREAT_WHAT, Note.THREAT_NOT_COVERED)
"""The threat model of a site's own report, one sentence a line."""

MEANING_POINTS: tuple[str, ...] = (
    NOTES[Note.EPS_TILDE],
    NOTES[Note.READ_AS_LOWER_BOUND],
    *(prose.meaning for prose in FLAG_PROSE.values()),
    NOTES[Note.ONE_RUN_BOUNDS],
    NOTES[Note.DP_EPS],
    NOTES[Note.TWO_SIDED],
    NOTES[Note.SIDES],
    NOTES[Note.LEVELS],
    NOTES[Note.LOW_FPR],
    NOTES[Note.O1_ABOVE],
)
"""The report's "what eps_tilde means" list, in its order."""
