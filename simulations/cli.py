"""``panoramia-fl``: run, resume, report, sweep, audit, bounds, gate and cache."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from panoramia_fl.contracts.errors import ERROR_PREFIX, UserError, memory_killed, memory_killer_line
from panoramia_fl.contracts.files import atomic_write_text, check_writable
from panoramia_fl.contracts.json_values import json_safe
from panoramia_fl.contracts.run_files import CONFIG_FILE, RunLayout
from panoramia_fl.simulations.data_ahead import run_dataset_ahead
from panoramia_fl.simulations.process_heap import exit_without_teardown, freeze_before_exit

if TYPE_CHECKING:
    from panoramia_fl.reporting import LostSites, ReportFiles
    from panoramia_fl.reporting.assembly.run_config import ReportConfig
    from panoramia_fl.simulations.experiment_config import ExperimentConfig
    from panoramia_fl.simulations.sweep import SweepConfig

# Each command imports what it runs (config, Flower, torch ...) when it runs: ``--help`` and
# argument errors stay instant.

SITES_LOST = 75
"""Exit status of a run that lost sites (an audit or a round's update) or was stopped by Ray's
memory killer: sysexits' EX_TEMPFAIL. Nothing else in panoramia-fl ends with it, and a
plugin cannot end the run with a code of its own (its ``sys.exit`` at import is a named
error, exit 2)."""

MEMORY_ADVICE = (
    "run fewer sites at once: raise resources.num_cpus (training) or resources.audit_num_cpus "
    "(audits), the CPUs each site takes of Ray's, or lower ray.num_cpus"
)


def cmd_run(args: argparse.Namespace) -> int:
    if args.seeds is not None:
        return _run_replicates(args)
    from panoramia_fl.simulations.ray_start import ray_started_ahead

    config, run_dir = _run_config(args)
    layout = RunLayout(run_dir)
    print(f"run directory: {run_dir}", file=sys.stderr)
    data = run_dataset_ahead(config)
    try:
        # Ray first, then torch, Flower, the project and the run's data: its site processes
        # import theirs meanwhile (the config above needed none of them).
        with ray_started_ahead(config, layout, verbose=args.verbose, ahead=data.compute_ahead):
            from panoramia_fl.simulations.runner import run_experiment

            outcome = run_experiment(config, run_dir, verbose=args.verbose, read_dataset=data.take)
    except KeyboardInterrupt as stop:
        if not layout.config.exists():
            _exit_interrupted(stop, f"nothing was written to {run_dir}; run the same command again")
        from panoramia_fl.simulations.runner import training_done

        # Training done: the stop came in the audit phase (or the report).
        abandoned = (
            "the site audits in progress were abandoned"
            if training_done(config, layout)
            else "the round in progress was abandoned"
        )
        _exit_interrupted(
            stop,
            f"finished rounds and audits are kept in {run_dir}; {abandoned}; continue with: "
            f"panoramia-fl run --resume {run_dir}",
        )
    except Exception as err:
        if not memory_killed(err):
            raise
        return _memory_killed(err, f"panoramia-fl run --resume {run_dir}", kept=run_dir)
    from panoramia_fl.contracts.run_log import read_rounds, untrained_reason

    _print_warnings(outcome.report_warnings)
    untrained = untrained_reason(read_rounds(layout))
    if untrained is not None:
        # Everything is written (report included); the exit status tells scripts and sweeps.
        raise UserError(f"{run_dir}: {untrained}; report: {layout.report_html}")
    timings = ", ".join(f"{k} {v:.1f}s" for k, v in outcome.timings.items())
    print(f"done: {timings}\nreport: {layout.report_html}")
    return SITES_LOST if _say_losses(outcome.lost, f"panoramia-fl run --resume {run_dir}") else 0


def _run_config(args: argparse.Namespace) -> tuple[ExperimentConfig, Path]:
    """``run``'s config and run directory: ``--resume``'s own config (untouched since the
    run wrote it) with the ``--set`` it may take, or CONFIG's, which a run directory that
    already holds a run must hold too."""
    from panoramia_fl.simulations.config_file import check_config_digest, load_run_config
    from panoramia_fl.simulations.experiment_config import ConfigError, load_config

    if args.resume is not None:
        run_dir = Path(args.resume)
        stored = RunLayout(run_dir).config
        if not stored.exists():
            raise ConfigError(f"--resume: {run_dir} has no {CONFIG_FILE}; not a run directory")
        if args.plugin:
            raise ConfigError(
                f"--plugin: a resumed run imports the plugins its {CONFIG_FILE} lists"
            )
        check_config_digest(stored)
        config = load_run_config(stored, args.set)
        if args.set:
            from panoramia_fl.simulations.resume import check_resume

            check_resume(load_run_config(stored), config, args.set, RunLayout(run_dir))
        return config, run_dir
    if args.config is None:
        raise ConfigError("give a CONFIG file, or --resume RUN_DIR")
    config = _with_plugins(load_config(Path(args.config), args.set), args.plugin)
    run_dir = args.out if args.out is not None else config.output_dir / config.name
    existing = RunLayout(run_dir).config
    if existing.exists():
        check_config_digest(existing)
        if load_run_config(existing) != config:
            raise ConfigError(
                f"{run_dir} already holds a run with another config; use "
                f"--resume {run_dir}, another --out, or another name"
            )
    return config, run_dir


def _memory_killed(err: Exception, resume: str, *, kept: Path) -> int:
    """One line for a run that Ray's memory killer stopped: what it ended, what to change,
    what is kept and how to continue; the exit status :data:`SITES_LOST`."""
    what = (memory_killer_line(err) or type(err).__name__)[:300]
    print(
        f"{ERROR_PREFIX}Ray's memory killer ended a process of the run, as the machine "
        f"ran short of memory ({what}); {MEMORY_ADVICE}. Finished rounds and audits are kept "
        f"in {kept}; continue with: {resume}",
        file=sys.stderr,
    )
    return SITES_LOST


def _say_losses(lost: LostSites, resume: str, label: str = "") -> bool:
    """A run's lost sites (as its written report has them) on stderr, one line each (after
    ``label``), what to change when Ray's memory killer caused them, and how to audit them
    again; whether it lost any."""
    for line in lost.lines():
        print(f"panoramia-fl: {label}{line}", file=sys.stderr)
    if lost.memory_killed:
        print(f"panoramia-fl: {label}next time, {MEMORY_ADVICE}.", file=sys.stderr)
    if lost.failed_audits or lost.missing_audits:
        print(f"panoramia-fl: {label}audit the lost sites again with: {resume}", file=sys.stderr)
    return bool(lost)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread: a run stops as on Ctrl-C."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def _exit_interrupted(stop: KeyboardInterrupt, what_next: str) -> NoReturn:
    """Say what is kept and how to continue, then exit 130 (SIGINT) or 143 (SIGTERM).

    By now the simulation's threads have ended and Ray is shut down (``runner`` waits for
    the ServerApp's thread, :mod:`~simulations.engine_end` for the engine's), each within a
    bound; one that outlived its bound would keep Python's normal exit waiting for good, so
    the process ends here, output flushed.
    """
    signum = signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT
    print(f"\ninterrupted ({signal.Signals(signum).name}): {what_next}", file=sys.stderr)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + signum)


def _run_replicates(args: argparse.Namespace) -> int:
    """``run CONFIG --seeds N``: N runs of the config, one per seed, and their report."""
    import time

    from panoramia_fl.simulations.experiment_config import ConfigError, load_config
    from panoramia_fl.simulations.replicate_runs import SET_SUFFIX, run_replicates

    if args.resume is not None or args.config is None:
        raise ConfigError("--seeds: give a CONFIG (to continue a set, run the same command again)")
    config = _with_plugins(load_config(Path(args.config), args.set), args.plugin)
    set_dir = args.out if args.out is not None else config.output_dir / (config.name + SET_SUFFIX)
    print(f"replicate set: {set_dir}", file=sys.stderr)
    t0 = time.time()
    again = "the same command"
    try:
        outcome = run_replicates(config, set_dir, args.seeds, verbose=args.verbose)
    except KeyboardInterrupt as stop:
        _exit_interrupted(
            stop,
            f"finished runs, rounds and audits are kept in {set_dir}; the round or the audits "
            f"in progress were abandoned; continue with {again}",
        )
    except Exception as err:
        if not memory_killed(err):
            raise
        return _memory_killed(err, again, kept=set_dir)
    lost = False
    for seed, _ in outcome.runs:
        _print_warnings(outcome.report_warnings.get(seed, []))
        lost |= _say_losses(outcome.lost[seed], again, label=f"seed {seed}: ")
    timings = ", ".join(f"{k} {v:.1f}s" for k, v in outcome.timings.items())
    print(f"done: {timings}, total {time.time() - t0:.1f}s\nreport: {outcome.files.html_path}")
    return SITES_LOST if lost else 0


def _with_plugins(config: ExperimentConfig, modules: list[str]) -> ExperimentConfig:
    """``config`` with ``--plugin`` modules added to ``plugins`` (imported as it validates;
    config.yaml then lists them, so a resumed run and every site import them too)."""
    if not modules:
        return config
    from panoramia_fl.simulations.experiment_config import validate_config

    plugins = list(dict.fromkeys([*config.plugins, *modules]))
    return validate_config({**config.model_dump(mode="json"), "plugins": plugins})


def cmd_report(args: argparse.Namespace) -> int:
    from panoramia_fl.contracts.errors import RunFileError
    from panoramia_fl.reporting import SWEEP_JSON, write_report, write_site_report
    from panoramia_fl.simulations.config_file import report_config

    layout = RunLayout(Path(args.run_dir))
    sweep = not layout.config.exists() and (layout.root / SWEEP_JSON).exists()
    if args.pdf:
        from panoramia_fl.reporting.pages.pdf import chromium

        if sweep:
            raise UserError(f"--pdf: {layout.root} is a sweep; give one of its points' run folders")
        chromium()  # before any work: without it, say what to install
    pdfs: list[Path] = []
    try:
        if sweep:
            files = _sweep_report_again(layout.root, site=args.site)
        elif args.site is not None:
            config = report_config(layout, optional=True)
            check_writable(layout.site_reports)
            files = write_site_report(layout, args.site, config)
            pdfs = _site_pack(layout, args.site, config) if args.pdf else []
        else:
            config = report_config(layout)
            check_writable(layout.root)
            check_writable(layout.site_reports)
            files = write_report(layout, config)
            pdfs = _packs(layout, config) if args.pdf else []
    except RunFileError as err:
        print(f"{ERROR_PREFIX}{err}", file=sys.stderr)
        return 2
    _print_warnings(files.warnings)
    print(files.html_path)
    for pdf in pdfs:
        print(pdf)
    return 0


def _packs(layout: RunLayout, config: ReportConfig) -> list[Path]:
    """``report --pdf``: the consortium's evidence pack and each audited site's."""
    from panoramia_fl.reporting.evidence.evidence_files import write_evidence_packs

    packs = write_evidence_packs(layout, config)
    return [packs.consortium, *packs.sites]


def _site_pack(layout: RunLayout, site_id: int, config: ReportConfig) -> list[Path]:
    """``report --site ID --pdf``: that site's evidence pack from its audit file alone."""
    from panoramia_fl.reporting.evidence.evidence_files import write_site_evidence_pack

    return [write_site_evidence_pack(layout, site_id, config)]


def _sweep_report_again(sweep_dir: Path, *, site: int | None) -> ReportFiles:
    """``report SWEEP_DIR``: each point's report and the sweep's, written again from the
    points' saved runs (nothing trains or audits)."""
    from panoramia_fl.reporting import saved_sweep, write_sweep_report
    from panoramia_fl.simulations.config_file import report_config

    if site is not None:
        raise UserError(f"--site: {sweep_dir} is a sweep; give one of its points' run folders")
    points, unfinished = saved_sweep(sweep_dir)
    check_writable(sweep_dir)
    for layout in (p.layout for p in points if p.layout.config.exists()):
        check_writable(layout.root)
        check_writable(layout.site_reports)
    files = write_sweep_report(
        sweep_dir, points, report_config, write_point_reports=True, unfinished=tuple(unfinished)
    )
    if unfinished:
        print(f"panoramia-fl: sweep not finished: {', '.join(unfinished)}", file=sys.stderr)
    return files


def _print_warnings(lines: list[str]) -> None:
    """Bound violations (a bug or a 1-in-1/beta event) on stderr, where they are seen."""
    for line in lines:
        print(f"panoramia-fl: {line}", file=sys.stderr)


def cmd_sweep(args: argparse.Namespace) -> int:
    from panoramia_fl.reporting import (
        SWEEP_JSON,
        SweepPoint,
        write_sweep_progress,
        write_sweep_report,
    )
    from panoramia_fl.simulations.config_file import report_config
    from panoramia_fl.simulations.runner import nothing_to_run
    from panoramia_fl.simulations.shared_ray import SharedRay
    from panoramia_fl.simulations.sweep import expand, load_sweep

    sweep = load_sweep(Path(args.sweep), args.set)
    points = expand(sweep)
    sweep_dir = sweep.output_dir / sweep.name
    again = f"panoramia-fl sweep {args.sweep}" + "".join(f" --set {s}" for s in args.set)
    done: list[SweepPoint] = []
    lost = False
    run_dir = sweep_dir
    # sweep.json after each point: a stopped sweep's report shows the finished ones, and
    # running the same sweep again continues it (a finished point's run has nothing to do).
    # The first one only where there is none: a sweep run again keeps its report meanwhile.
    if not (sweep_dir / SWEEP_JSON).exists():
        write_sweep_progress(sweep_dir, done, report_config, [label for label, _, _ in points])
    try:
        with SharedRay() as shared:  # Ray starts once for the sweep, if a point needs it
            for i, (label, overrides, config) in enumerate(points):
                run_dir = sweep_dir / label
                print(f"sweep point {label}: {run_dir}", file=sys.stderr)
                finished = sweep.replicates == 1 and nothing_to_run(config, RunLayout(run_dir))
                with nullcontext() if finished else shared.joined(config):
                    runs = _sweep_point_runs(config, run_dir, sweep, args)
                for seed, _, run_lost in runs:
                    lost |= _say_losses(run_lost, again, label=f"{label}, seed {seed}: ")
                done.append(SweepPoint(label, overrides, layout=runs[0][1]))
                rest = [label for label, _, _ in points[i + 1 :]]
                write_sweep_progress(sweep_dir, done, report_config, rest)
    except KeyboardInterrupt as stop:
        _exit_interrupted(
            stop,
            f"the sweep's finished points are in {sweep_dir / 'sweep.json'} (panoramia-fl "
            f"report {sweep_dir}); run the same sweep again to continue from {run_dir}: {again}",
        )
    except Exception as err:
        if not memory_killed(err):
            raise
        return _memory_killed(err, again, kept=run_dir)
    files = write_sweep_report(sweep_dir, done, report_config)
    _print_warnings(files.warnings)
    print(files.html_path)
    return SITES_LOST if lost else 0


def _sweep_point_runs(
    config: ExperimentConfig, run_dir: Path, sweep: SweepConfig, args: argparse.Namespace
) -> list[tuple[int, RunLayout, LostSites]]:
    """One point of a sweep: its run, or its replicate set's runs (seed, run directory, the
    sites it lost)."""
    from panoramia_fl.simulations.replicate_runs import run_replicates
    from panoramia_fl.simulations.runner import run_experiment

    if sweep.replicates > 1:
        outcome = run_replicates(
            config, run_dir, sweep.replicates, verbose=args.verbose, key="replicates"
        )
        return [(seed, layout, outcome.lost[seed]) for seed, layout in outcome.runs]
    run = run_experiment(config, run_dir, verbose=args.verbose)
    return [(config.seed, run.layout, run.lost)]


def cmd_audit(args: argparse.Namespace) -> int:
    from panoramia_fl.simulations.standalone_audit import audit_saved_model

    checkpoint = Path(args.checkpoint)
    if args.out:
        # Before the audit, which would otherwise be lost at the end.
        if Path(args.out).is_dir():
            raise UserError(f"--out: {args.out} is a folder; give the file to write")
        check_writable(Path(args.out).parent)
    result = audit_saved_model(
        checkpoint,
        Path(args.config),
        site=args.site,
        run=RunLayout(checkpoint.parent),
        overrides=args.set,
        warn=lambda line: _print_warnings([line]),
    )
    one = result.one_sided
    summary = json_safe(
        {
            "c_lb": one.c_lb,
            "c_eps_lb": one.c_eps_lb,
            "eps_tilde": one.eps_tilde,
            "ceiling": one.ceiling,
            "flags": one.flags,
            "rm_rn_eps_lb": one.rm_rn_eps_lb,
            "o1_eps_lb": result.o1_eps_lb,
            "generator_kind": result.generator_kind,
        }
    )
    text = json.dumps(json_safe(result), indent=1)
    if args.out:
        atomic_write_text(Path(args.out), text)
    print(json.dumps(summary, indent=1))
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from panoramia_fl.simulations.weights_cache import cache_dir_setting, cache_summary, clear_cache

    root = cache_dir_setting()
    if root is None:
        print("the weights cache is off (--cache off or PANORAMIA_FL_CACHE=off)")
        return 0
    if args.action == "clear":
        files, size = clear_cache(root)
        print(f"{root}: removed {files} files ({size / 1e6:.1f} MB)")
    else:
        entries, size = cache_summary(root)
        print(f"{root}: {entries} entries ({size / 1e6:.1f} MB)")
    return 0


def _add_cache_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache",
        metavar="DIR",
        help="the weights cache: reference models trained once for every run with the same "
        "public records and settings (default $PANORAMIA_FL_CACHE, else "
        "~/.cache/panoramia-fl; 'off': none)",
    )


def _add_set_option(parser: argparse.ArgumentParser, *, help: str) -> None:
    """``--set KEY=VALUE``, repeatable: overrides of the file the command reads."""
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=help)


def _add_verbose_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verbose", action="store_true", help="show Flower/Ray/Opacus logs")


def _add_run_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser("run", help="federated training, per-site audits and the report")
    run.add_argument("config", nargs="?", help="YAML experiment config")
    _add_set_option(run, help="override a config key, e.g. --set fl.rounds=3")
    run.add_argument("--out", type=Path, help="run directory (default output_dir/name)")
    run.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (registers your models, datasets ...) before anything is looked "
        "up; added to the config's plugins (docs/plugins.md)",
    )
    run.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue an interrupted run: missing rounds, then missing audits",
    )
    run.add_argument(
        "--seeds",
        type=int,
        metavar="N",
        help="N runs (seed, seed+1, ...) on the same partition in OUT/seed-<s>/ (default "
        "OUT: output_dir/NAME-replicates), pooled in replicates.html; the same command "
        "again continues them",
    )
    _add_cache_option(run)
    _add_verbose_option(run)
    run.set_defaults(func=cmd_run)


def _add_report_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser(
        "report",
        help="regenerate report.* and site-reports/ from a run's saved results, or a "
        "sweep's sweep.* and its points' reports from their saved runs",
    )
    report.add_argument(
        "run_dir",
        help="the run directory (holds config.yaml and audits/), or a sweep's folder (holds "
        "sweep.json)",
    )
    report.add_argument(
        "--site",
        type=int,
        metavar="ID",
        help="only rebuild site-reports/site-ID.* from audits/site-ID.json alone "
        "(plus config.yaml if present); the consortium standing then reads unavailable",
    )
    report.add_argument(
        "--pdf",
        action="store_true",
        help="also print the evidence pack to PDF with headless Chromium: evidence.pdf and "
        "site-reports/site-ID.pdf per audited site (with --site: that site's alone); "
        "docs/evidence.md",
    )
    report.set_defaults(func=cmd_report)


def _add_sweep_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sweep = sub.add_parser("sweep", help="run a grid of configs and compare them")
    sweep.add_argument("sweep", help="sweep YAML (base config + grid)")
    _add_set_option(
        sweep,
        help="override a key of the sweep file, e.g. --set replicates=3 (each point over 3 "
        "seeds, with between-run error bars)",
    )
    _add_cache_option(sweep)
    _add_verbose_option(sweep)
    sweep.set_defaults(func=cmd_sweep)


def _add_audit_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser("audit", help="audit a saved global model on one site's data")
    audit.add_argument("checkpoint", help="global_model.pt (or a round checkpoint)")
    audit.add_argument("--config", required=True, help="the run's config.yaml")
    audit.add_argument("--site", type=int, required=True, help="whose members to audit (site ID)")
    _add_set_option(
        audit, help="override a key of that config, e.g. --set audit.settings.repeats=1"
    )
    audit.add_argument("--out", help="write the full PanoramiaResult JSON here")
    audit.set_defaults(func=cmd_audit)


def _add_cache_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cache = sub.add_parser(
        "cache", help="show or clear the weights cache (reference models shared by runs)"
    )
    cache.add_argument("action", choices=["show", "clear"], help="show: its folder and size")
    _add_cache_option(cache)
    cache.set_defaults(func=cmd_cache)


def build_parser() -> argparse.ArgumentParser:
    """``panoramia-fl`` and its commands, each added by a function of its own."""
    from panoramia_fl.simulations import cmd_bounds, cmd_gate

    parser = argparse.ArgumentParser(
        prog="panoramia-fl",
        description="Federated training with per-site PANORAMIA privacy audits: run, resume, "
        "report, sweep, audit, bounds, gate and cache. 'panoramia-fl COMMAND --help' describes "
        "each.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="one of:")
    for add_command in (
        _add_run_command,
        _add_report_command,
        _add_sweep_command,
        _add_audit_command,
        _add_cache_command,
    ):
        add_command(sub)
    cmd_bounds.register(sub)
    cmd_gate.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.command in ("run", "sweep"):
        signal.signal(signal.SIGTERM, _terminate)
    if getattr(args, "cache", None):
        from panoramia_fl.simulations.weights_cache import CACHE_ENV

        # The variable, not an argument: every stage of the run (and a sweep's every point)
        # reads the same folder, as it would with the variable set by the user.
        os.environ[CACHE_ENV] = args.cache
    try:
        return int(args.func(args))
    except UserError as err:
        # Only errors the user can fix: anything else is a bug and keeps its traceback.
        print(f"{ERROR_PREFIX}{err}", file=sys.stderr)
        return 2


def program() -> NoReturn:
    """``panoramia-fl`` as a process (the console script, ``python -m``): :func:`main`, then
    the process's exit."""
    try:
        status = main()
    finally:
        # The run's files are written and closed by now (atomic writes, context managers).
        # An exception's exit tears the modules down: without the collector's walk.
        freeze_before_exit()
    exit_without_teardown(status)


if __name__ == "__main__":
    program()
