"""What the gradient-inversion audit costs one site of the default, and what it finds.

One site of the default (Fashion-MNIST, the small CNN, 1,100 members drawn at random, batch
64, Adam, 8 local epochs) trains round 1 from the seeded initial model as a run's site does
(``clients.site_training.train_locally``), keeps it (``clients.inversion.keep_round``) and runs
its inversion audit (``clients.inversion.inversion_audit``, the config's
``audit.inversion`` or its defaults); prints the wall time of the audit and its numbers
beside the public-record baseline. ``--set`` takes the CLI's overrides, e.g.
``--set fl.local_steps=1`` (FedSGD) or ``--set dp.enabled=true --set dp.target_epsilon=1``
(record-level DP-SGD).

``--steps-in S`` measures the attack's speed instead: after two warm-up steps, the steps one
attack on the round's update reaches in ``S`` seconds on one CPU thread and, when CUDA is
present, on the GPU, and their ratio (``benchmarks/gpu_check.py`` reads the lines it prints);
its restarts (the config's, 2 by default) step side by side, a step of each counted.

Run: ``.venv/bin/python benchmarks/inversion_cost.py [--set key=value ...] [--steps-in S]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from panoramia_fl.audit.inversion.attack import LocalTraining, RecordSpec, invert
from panoramia_fl.audit.inversion.inversion_config import InversionConfig
from panoramia_fl.clients.inversion import InversionSettings, inversion_audit, keep_round
from panoramia_fl.clients.privacy import AccountantHistory
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.clients.site_training import LocalTrainResult, train_locally
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.tasks import TorchTask
from panoramia_fl.simulations.apps import dp_settings
from panoramia_fl.simulations.experiment_config import ExperimentConfig, load_config
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.run_task import make_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, default=Path("configs/default.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--members", type=int, default=1_100)
    parser.add_argument("--steps-in", type=float, help="time the attack's steps instead")
    args = parser.parse_args()

    torch.set_num_threads(1)
    config = load_config(args.config, args.overrides)
    dataset = load_dataset(config.data.name, root=config.data.root, options=config.data.options)
    task = make_task(config, DatasetMeta.of(dataset))
    rng = np.random.default_rng(0)
    members = rng.choice(len(dataset.x), args.members, replace=False)
    assert dataset.y is not None and dataset.public_x is not None and dataset.public_y is not None
    data = SiteData(
        site_id=0,
        train_x=dataset.x[members],
        train_y=dataset.y[members],
        holdout_x=dataset.x[:0],
        holdout_y=dataset.y[:0],
        test_x=dataset.x[:0],
        test_y=dataset.y[:0],
        public_x=dataset.public_x,
        public_y=dataset.public_y,
    )
    torch.manual_seed(config.seed)
    start = {k: v.detach().clone() for k, v in task.make_model().state_dict().items()}
    dp = dp_settings(config)
    began = time.perf_counter()
    out = train_locally(
        task,
        start,
        x=data.train_x,
        y=data.train_y,
        epochs=config.fl.local_epochs,
        seed=config.seed,
        device=torch.device("cpu"),
        dp=dp,
        accountant_history=None
        if dp is None
        else AccountantHistory(accountant=dp.accountant, history=[]),
        local_steps=config.fl.local_steps,
    )
    trained = time.perf_counter() - began
    attack = config.audit.inversion or InversionConfig()
    if args.steps_in is not None:
        attack_speed(task, config, start, out, attack, args.steps_in)
        return
    with tempfile.TemporaryDirectory() as folder:
        settings = InversionSettings(config=attack, site_id=0, state_dir=Path(folder))
        keep_round(
            settings, 1, start, out, epochs=config.fl.local_epochs, steps=config.fl.local_steps
        )
        began = time.perf_counter()
        found = inversion_audit(settings, task, data, seed=config.seed)
        audited = time.perf_counter() - began
    (result,) = found
    print(f"overrides: {' '.join(args.overrides) or '(none)'}; round 1 trained in {trained:.1f} s")
    print(
        f"inversion audit: {audited:.1f} s wall ({result.iterations} attack steps, "
        f"time limit {attack.time_limit_s:g} s per attack); {result.attack}, "
        f"{result.n_records:,} records in the update, {result.n_scored} scored"
    )
    print(f"record-level eps after round 1: {result.dp_epsilon}")
    print(
        f"SSIM mean / median / max {result.quality_mean:.3f} / {result.quality_median:.3f} / "
        f"{result.quality_max:.3f}, rebuilt (>= {result.threshold}) {result.share_rebuilt:.0%}, "
        f"PSNR {result.psnr_mean:.1f} dB; match loss {result.match_loss:.3f}"
    )
    print(
        f"baseline: SSIM mean / max {result.baseline_quality_mean:.3f} / "
        f"{result.baseline_quality_max:.3f}, rebuilt {result.baseline_share_rebuilt:.0%}, "
        f"PSNR {result.baseline_psnr_mean:.1f} dB"
    )


def attack_speed(
    task: TorchTask,
    config: ExperimentConfig,
    start: dict[str, torch.Tensor],
    trained: LocalTrainResult,
    attack: InversionConfig,
    seconds: float,
) -> None:
    """Steps one attack on ``trained``'s update reaches in ``seconds`` on one CPU thread and
    on CUDA (if present)."""
    update = {k: trained.state_dict[k].float() - v.float() for k, v in start.items()}
    training = LocalTraining(
        num_examples=trained.num_examples,
        batch_size=config.fl.batch_size,
        epochs=config.fl.local_epochs,
        steps=config.fl.local_steps,
        optimizer=config.fl.optimizer,
        learning_rate=config.fl.learning_rate,
        weight_decay=config.fl.weight_decay,
    )
    spec = RecordSpec(task.modality, tuple(task.input_shape), task.num_classes)
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    steps: dict[str, float] = {}
    for device in devices:
        for budget, limit in ((2, 3_600.0), (10**9, seconds)):  # warm-up, then timed
            timed = attack.model_copy(update={"iterations": budget, "time_limit_s": limit})
            cpu = time.process_time()
            recon = invert(
                task.make_model(),
                start,
                update,
                training,
                spec=spec,
                config=timed,
                seed=0,
                device=device,
            )
        steps[device.type] = recon.iterations / recon.seconds
        cpu_ms = 1000 * (time.process_time() - cpu) / recon.iterations
        print(
            f"attack speed: {device.type}: {recon.iterations} steps in {recon.seconds:.1f} s "
            f"({1000 * recon.seconds / recon.iterations:.0f} ms a step, {cpu_ms:.0f} ms of CPU; "
            f"torch threads {torch.get_num_threads()})"
        )
    if "cuda" in steps:
        print(f"attack speed: cuda / cpu steps ratio {steps['cuda'] / steps['cpu']:.1f}")


if __name__ == "__main__":
    main()
