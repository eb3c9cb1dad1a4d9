"""The sites' checks on received models: false flags on honest rounds, detection of crafted ones.

Honest rounds: in-process FedAvg with the project's own local training (``train_locally``,
Opacus under DP) between two sites of each setting (the default image config, tabular, text;
each without DP and with record-level DP-SGD at noise multiplier 1.0, set rather than
calibrated to an epsilon, which only costs time), each site training on its first
``--records`` records for ``--epochs`` local epochs a round. Before every round the server's
announcement (the digest of the round's model) is published by every site, then each site runs
every check a site runs in a run (:func:`clients.model_checks.check_received`: consistency
against that bulletin, plausibility against the previous global model, the structure checks
on its own records). ``--phase calibration`` runs seed 100 of each setting and prints each
check's statistic (the thresholds in ``audit/received_model/thresholds.py`` come from it);
``--phase evaluation`` runs seeds 0..n-1 and prints each check's false-flag rate with its
95% Clopper-Pearson interval.

Detection (evaluation phase): on the image and tabular settings, at rounds 1, 4 and 7 the
server replaces the model it sends with one crafted by ``audit.adversary`` from that round's
global model and 2,000 public records: ``imprint`` and ``trap`` to site 0, and
``inconsistent`` (the real model to site 0, the dead model to site 1); the round's
announcement is the real model (what ``server.announce`` does). Each check's detection rate
over the sites that received a crafted model, and that of the checks that need no bulletin
(a server that sends every site the same crafted model and announces it).

Run::

    nice -n 10 python benchmarks/model_checks_null.py --phase calibration --rounds 7   # ~2 min
    nice -n 10 python benchmarks/model_checks_null.py --phase evaluation --rounds 7   # ~10 min
    python benchmarks/model_checks_null.py --phase evaluation --load stats.json   # report only
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, RecordDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from null_validity import clopper_pearson  # noqa: E402

from panoramia_fl.audit.adversary import SiteOptimizer, craft_dead, craft_imprint, craft_trap  # noqa: E402
from panoramia_fl.audit.received_model.digest import model_digest  # noqa: E402
from panoramia_fl.audit.received_model.thresholds import THRESHOLDS  # noqa: E402
from panoramia_fl.clients.model_checks import ModelCheckSettings, check_received, publish  # noqa: E402
from panoramia_fl.clients.privacy import AccountantHistory  # noqa: E402
from panoramia_fl.clients.site_data import SiteData  # noqa: E402
from panoramia_fl.clients.site_training import train_locally  # noqa: E402
from panoramia_fl.contracts.model_flags import (  # noqa: E402
    CHECK_NAMES,
    RoundAnnouncement,
    read_check_records,  # noqa: E402
)
from panoramia_fl.contracts.run_files import RunLayout  # noqa: E402
from panoramia_fl.simulations.apps import dp_settings  # noqa: E402
from panoramia_fl.simulations.experiment_config import load_config  # noqa: E402
from panoramia_fl.simulations.model_check_settings import agreed_training  # noqa: E402
from panoramia_fl.simulations.run_dir import load_public, prepare_run_dir  # noqa: E402
from panoramia_fl.simulations.run_task import make_task  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DP = ["dp.enabled=true", "dp.noise_multiplier=1.0", "dp.accountant=rdp"]
SETTINGS: dict[str, tuple[str, list[str]]] = {
    "image": ("configs/default.yaml", []),
    "image+dp": ("configs/default.yaml", DP),
    "tabular": ("configs/tabular.yaml", []),
    "tabular+dp": ("configs/tabular.yaml", DP),
    "text": ("configs/text.yaml", []),
    "text+dp": ("configs/text.yaml", DP),
}
CALIBRATION_SEEDS = (100,)
ATTACK_ROUNDS = (1, 4, 7)
SITES = (0, 1)
STRUCTURE = ("lone_units", "repeated_rows", "dead_units")


@dataclass
class Setting:
    """One config's task, two sites' first records, public records for the crafting."""

    name: str
    config: Any
    task: Any
    sites: dict[int, tuple[np.ndarray, np.ndarray | None]]
    public: torch.Tensor | None


def build(name: str, root: Path, records: int, epochs: int) -> Setting:
    path, overrides = SETTINGS[name]
    overrides = [*overrides, f"fl.local_epochs={epochs}"]
    config = load_config(REPO / path, overrides)
    layout = RunLayout(root / name)
    meta = prepare_run_dir(config, layout)
    task = make_task(config, meta)
    sites = {}
    for site in SITES:
        data = SiteData.load(layout.site_file(site))
        y = data.training_y
        sites[site] = (data.training_x[:records], None if y is None else y[:records])
    public = load_public(layout)
    if public is None or meta.modality == "text":  # the text models have no first ReLU layer
        return Setting(name, config, task, sites, None)
    y = None if public.y is None else public.y[:2000]
    x = task.tensors(public.x[:2000], y)[0]
    return Setting(name, config, task, sites, x)


@dataclass
class Site:
    """One simulated site's checks: its settings (bulletin, log) and node state."""

    settings: ModelCheckSettings
    context: Context

    def check(self, site: int, setting: Setting, rnd: int, received: ArrayRecord):
        """Check the model as a site does before training, once every site of the round has
        published its announcement; (checks flagged, every outcome)."""
        check_received(
            self.settings,
            site_id=site,
            server_round=rnd,
            received=received,
            task=setting.task,
            records=setting.sites[site][0],
            labels=setting.sites[site][1],
            context=self.context,
        )
        assert self.settings.log is not None
        last = read_check_records(self.settings.log)[-1]
        return {o.check: [o.statistic, o.threshold] for o in last.outcomes}


def site_checks(setting: Setting, folder: Path) -> dict[int, Site]:
    fl = setting.config.fl
    largest = max(len(x) for x, _ in setting.sites.values())
    steps = fl.local_epochs * math.ceil(largest / fl.batch_size)
    made = {}
    for site in SITES:
        settings = ModelCheckSettings(
            batch_size=fl.batch_size,
            agreed=agreed_training(setting.config, steps),
            bulletin=folder / "bulletin",
            min_sites=len(SITES),
            refuse=False,  # record: the benchmark reads every statistic
            log=folder / f"site-{site}.jsonl",
        )
        context = Context(run_id=0, node_id=site, node_config={}, state=RecordDict(), run_config={})
        made[site] = Site(settings, context)
    return made


def as_record(state: dict[str, torch.Tensor]) -> ArrayRecord:
    return ArrayRecord({k: v.detach().cpu().contiguous() for k, v in state.items()})


def digest_of(record: ArrayRecord) -> str:
    return model_digest({k: a.numpy() for k, a in record.items()})


def fedavg(states: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    total = sum(weights)
    out: dict[str, torch.Tensor] = {}
    for k, v in states[0].items():
        if v.is_floating_point():
            summed = torch.zeros_like(v)
            for s, w in zip(states, weights, strict=True):
                summed = summed + w * s[k]
            out[k] = summed / total
        else:
            out[k] = v.clone()
    return out


def crafted(setting: Setting, state: dict[str, torch.Tensor], attack: str, seed: int):
    model = setting.task.make_model()
    model.load_state_dict(state)
    fl = setting.config.fl
    site_optimizer = SiteOptimizer(name=fl.optimizer, learning_rate=fl.learning_rate)
    if attack in ("imprint", "trap"):
        craft = craft_imprint if attack == "imprint" else craft_trap
        made = craft(
            model,
            optimizer=site_optimizer,
            batch_size=fl.batch_size,
            public=setting.public,
            seed=seed,
        )
    else:
        assert setting.public is not None, "the dead model sizes its biases on public records"
        made = craft_dead(model, public=setting.public, seed=seed)
    return as_record(made.state_dict)


def detect(setting, seed, rnd, state, sites, out) -> None:
    """Each attack of this round, checked by the sites it reaches (their node state copied,
    so the honest run goes on as before); the round's bulletin announces the real model."""
    for attack in ("imprint", "trap", "inconsistent"):
        craft = "dead" if attack == "inconsistent" else attack
        model = crafted(setting, state, craft, seed * 1_000 + rnd)
        targets = {1: model} if attack == "inconsistent" else {0: model}
        for site, received in targets.items():
            copy = Site(
                replace(sites[site].settings, log=sites[site].settings.log.with_suffix(".attack")),
                Context(run_id=0, node_id=site, node_config={},
                        state=_copied(sites[site].context.state), run_config={}),
            )  # fmt: skip
            stats = copy.check(site, setting, rnd, received)
            out["attacks"].append([setting.name, attack, seed, rnd, site, stats])


def _copied(state: RecordDict) -> RecordDict:
    copy = RecordDict()
    for name, record in state.array_records.items():
        copy.array_records[name] = ArrayRecord({k: a for k, a in record.items()})
    for name, config in state.config_records.items():
        copy.config_records[name] = config
    return copy


def run_seed(setting: Setting, seed: int, rounds: int, *, attacks: bool, out: dict) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    state = {k: v.detach().clone() for k, v in setting.task.make_model().state_dict().items()}
    dp = dp_settings(setting.config, members=len(setting.sites[0][0]))
    with tempfile.TemporaryDirectory() as tmp:
        sites = site_checks(setting, Path(tmp))
        histories = {s: AccountantHistory(dp.accountant, []) for s in SITES} if dp else {}
        for rnd in range(1, rounds + 1):
            received = as_record(state)
            digest = digest_of(received)
            for site in SITES:  # the announce phase: every site publishes before any trains
                publish(sites[site].settings, site, RoundAnnouncement(rnd, digest, SITES))
            if attacks and rnd in ATTACK_ROUNDS and setting.public is not None:
                detect(setting, seed, rnd, state, sites, out)
            for site in SITES:
                stats = sites[site].check(site, setting, rnd, received)
                out["honest"].append([setting.name, seed, rnd, site, stats])
            trained, weights = [], []
            for site in SITES:
                x, y = setting.sites[site]
                result = train_locally(
                    setting.task,
                    state,
                    x=x,
                    y=y,
                    epochs=setting.config.fl.local_epochs,
                    seed=seed * 100_003 + rnd * 1_009 + site,
                    device=torch.device("cpu"),
                    dp=dp,
                    accountant_history=histories.get(site),
                    keep_used=False,
                )
                trained.append(result.state_dict)
                weights.append(1.0 if dp else float(len(x)))
            state = fedavg(trained, weights)


def rate(k: int, n: int) -> str:
    lo, hi = clopper_pearson(k, n)
    return f"{k}/{n} = {k / max(n, 1):.3f} [{lo:.3f}, {hi:.3f}]"


def span(values: list[float]) -> str:
    return f"{min(values):.4g} to {max(values):.4g}"


def flagged(stats: dict[str, list[float]]) -> set[str]:
    """The checks above their threshold: the structure checks' as set now (thresholds.py),
    the others' as the check computed it (exact or a proof)."""
    return {
        check
        for check, (value, threshold) in stats.items()
        if value > (THRESHOLDS[check][0] if check in STRUCTURE else threshold)
    }


def report_calibration(rows: list) -> None:
    print(f"\n## Calibration rounds (seeds {CALIBRATION_SEEDS}): each check's statistic")
    for check in CHECK_NAMES:
        values = [r[-1][check][0] for r in rows if check in r[-1]]
        if values:
            print(f"  {check:14s} n={len(values):4d}  {span(values)}")
    for name in SETTINGS:
        mine = [r for r in rows if r[0] == name]
        for check in STRUCTURE:
            values = [r[-1][check][0] for r in mine if check in r[-1]]
            if values:
                print(f"    {name:12s} {check:14s} {span(values)}")


def report(out: dict) -> None:
    print("\n## Evaluation rounds: false flags per check (95% Clopper-Pearson)")
    honest = out["honest"]
    for check in CHECK_NAMES:
        rows = [r for r in honest if check in r[-1]]
        if rows:
            k = sum(check in flagged(r[-1]) for r in rows)
            values = [r[-1][check][0] for r in rows]
            print(f"  {check:14s} {rate(k, len(rows))}  statistic {span(values)}")
    print(f"  {'any check':14s} {rate(sum(bool(flagged(r[-1])) for r in honest), len(honest))}")
    for name in SETTINGS:
        mine = [r for r in honest if r[0] == name]
        if mine:
            print(f"    {name:12s} any: {rate(sum(bool(flagged(r[-1])) for r in mine), len(mine))}")
    print("\n## Detection per attack (sites that received a crafted model)")
    for attack in ("imprint", "trap", "inconsistent"):
        rows = [r for r in out["attacks"] if r[1] == attack]
        if not rows:
            continue
        print(f"  {attack}: any check {rate(sum(bool(flagged(r[-1])) for r in rows), len(rows))}")
        alone = sum(bool(flagged(r[-1]) - {"consistency"}) for r in rows)
        print(f"    without the bulletin (structure, plausibility): {rate(alone, len(rows))}")
        for check in CHECK_NAMES:
            has = [r for r in rows if check in r[-1]]
            if has:
                k = sum(check in flagged(r[-1]) for r in has)
                values = [r[-1][check][0] for r in has]
                print(f"    {check:14s} {rate(k, len(has))}  statistic {span(values)}")
        for name in SETTINGS:
            mine = [r for r in rows if r[0] == name]
            if mine:
                k = sum(bool(flagged(r[-1]) - {"consistency"}) for r in mine)
                print(f"      {name:12s} without the bulletin: {rate(k, len(mine))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--phase", choices=("calibration", "evaluation"), required=True)
    parser.add_argument("--save", type=Path, help="write the rounds' statistics here (JSON)")
    parser.add_argument("--load", type=Path, help="report saved statistics, run nothing")
    parser.add_argument("--seeds", type=int, default=4, help="evaluation seeds 0..n-1")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=128, help="records per site")
    parser.add_argument("--epochs", type=int, default=1, help="local epochs a round")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="Secure RNG turned off")
    rows: dict = {"honest": [], "attacks": []}
    if args.load is not None:
        rows = json.loads(args.load.read_text())
    else:
        started = time.time()
        with tempfile.TemporaryDirectory() as root:
            for name in args.settings:
                setting = build(name, Path(root), args.records, args.epochs)
                calibrating = args.phase == "calibration"
                for seed in CALIBRATION_SEEDS if calibrating else range(args.seeds):
                    run_seed(setting, seed, args.rounds, attacks=not calibrating, out=rows)
                print(f"{name}: done at {time.time() - started:.0f} s", flush=True)
                if args.save is not None:
                    args.save.write_text(json.dumps(rows))
    if args.phase == "calibration":
        report_calibration(rows["honest"])
    else:
        report(rows)


if __name__ == "__main__":
    main()
