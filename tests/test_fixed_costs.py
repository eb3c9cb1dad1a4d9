"""What a run pays once per process: a site process builds each site once, however often
Flower hands it the ClientApp, and searches a DP-SGD noise multiplier once per run; and the
threads each part of a run takes."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from flwr.app import ArrayRecord, Context, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from panoramia_fl.clients.privacy import AccountantHistory
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.contracts.wire import ARRAYS, CONFIG, TrainInstructions
from panoramia_fl.simulations.apps import SiteResolver
from panoramia_fl.simulations.experiment_config import RAY_ADDRESS_ENV, validate_config
from panoramia_fl.simulations.run_dir import prepare_run_dir
from panoramia_fl.simulations.run_task import make_task


def _context(site_id: int) -> Context:
    return Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": site_id},
        state=RecordDict(),
        run_config={},
    )


REPO = Path(__file__).resolve().parents[1]


def _resolver(tmp_path: Path, **sections: dict) -> SiteResolver:
    config = validate_config(
        {
            "name": "built-once",
            "data": {"name": "digits"},
            "partition": {"scheme": "iid", "num_sites": 2},
            "audit": {"enabled": False},
            **sections,
        }
    )
    layout = RunLayout(tmp_path / "run")
    return SiteResolver(config, prepare_run_dir(config, layout), layout)


def _in_a_fresh_process(code: str, pickled: Path) -> str:
    """The standard output of ``code`` run by a new Python (as a site process is), with the
    tests on its path and the file ``pickled`` as its argument."""
    path = os.pathsep.join(p for p in (str(REPO / "tests"), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", code, str(pickled)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_a_run_reads_its_config_and_checks_its_resources_without_torch(tmp_path):
    """What ``panoramia-fl run`` does before it starts its Ray (read the config, check what
    a site must hold) imports neither torch nor Flower's engine nor the site code: a new
    run's Ray starts first, and its workers import theirs beside the driver
    (``simulations.ray_start.ray_started_ahead``)."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from panoramia_fl.simulations import cli\n"
        "config, _ = cli._run_config(cli.build_parser().parse_args(\n"
        "    ['run', sys.argv[1], '--out', '/nonexistent/run']))\n"
        "from panoramia_fl.simulations.ray_start import check_local_resources\n"
        "check_local_resources(config)\n"
        "heavy = ('torch', 'flwr.simulation', 'panoramia_fl.simulations.apps')\n"
        "print([name for name in heavy if name in sys.modules])\n"
    )
    assert _in_a_fresh_process(code, REPO / "configs" / "default.yaml").strip() == "[]"


def test_a_site_is_built_once_per_process_though_each_message_brings_a_copy(tmp_path):
    resolver = _resolver(tmp_path)
    config, meta, layout = resolver.config, resolver.meta, resolver.layout
    # Flower's simulation sends the ClientApp, and the resolver in it, pickled with every
    # message: each round's copy arrives with whatever the driver's instance holds.
    first, second = (pickle.loads(pickle.dumps(resolver)) for _ in range(2))
    site = first(_context(1))
    assert site.site_id == 1 and len(site.data.train_x) > 0
    assert second(_context(1)) is site
    assert second(_context(0)) is not site
    # Another run's resolver in the same process builds its own sites.
    assert SiteResolver(config, meta, layout)(_context(1)) is not site


def test_a_site_checks_a_received_model_on_its_own_threads(tmp_path, monkeypatch):
    """A site process trains and checks each received model on its site's threads
    (``resources.torch_threads``), however torch stood before: a Ray worker that imported
    torch as it started, before Ray gave it its CPUs, has one thread a core."""
    from panoramia_fl.clients import client_app

    resolver = _resolver(
        tmp_path,
        fl={"rounds": 1, "local_epochs": 1, "model_checks": "record"},
        resources={"torch_threads": 1},
    )
    seen: list[int] = []
    checks = client_app.check_received

    def observed(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return checks(*args, **kwargs)

    monkeypatch.setattr(client_app, "check_received", observed)
    # A message needs the run it belongs to (a ServerApp process sets it).
    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)
    state = resolver(_context(0)).task.make_model().state_dict()
    asked = TrainInstructions(local_epochs=1, seed=0, server_round=1)
    content = RecordDict({ARRAYS: ArrayRecord(state), CONFIG: asked.to_record()})
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        reply = client_app.build_client_app(resolver)(
            Message(content=content, message_type=MessageType.TRAIN, dst_node_id=1), _context(0)
        )
        assert not reply.has_error() and seen == [1]
    finally:
        torch.set_num_threads(threads)


def test_the_central_evaluation_leaves_the_training_sites_their_cores(tmp_path, monkeypatch):
    """A round's central evaluation runs in the driver while the sites train the next round:
    on two cores with two sites it takes one torch thread (more would spin on the sites'
    cores), and then gives the evaluating thread its count back. The last round, which
    nothing runs beside, is evaluated on the driver's threads, and so is every round of a
    deployment."""
    from panoramia_fl.ml.tasks import TorchTask
    from panoramia_fl.server.server_app import _central_evaluation
    from panoramia_fl.simulations.apps import central_evaluator

    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    config = validate_config(
        {
            "data": {"name": "digits"},
            "partition": {"scheme": "iid", "num_sites": 2},
            "ray": {"num_cpus": 2},
        }
    )
    layout = RunLayout(tmp_path / "run")
    meta = prepare_run_dir(config, layout)
    seen: list[int] = []
    evaluate = TorchTask.evaluate

    def observed(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(TorchTask, "evaluate", observed)
    torch.manual_seed(0)
    arrays = ArrayRecord(make_task(config, meta).make_model().state_dict())
    process_threads = torch.get_num_threads()

    def two_rounds(sites_here: bool) -> tuple[list[int], list[int], list[dict]]:
        evaluate_fn = _central_evaluation(
            central_evaluator(config, meta, layout, sites_here=sites_here), last_round=2
        )
        assert evaluate_fn is not None
        seen.clear()
        scores, after = [], []

        def round_commits() -> None:  # torch's thread count is the calling thread's own
            torch.set_num_threads(2)
            for server_round in (1, 2):
                scores.append(dict(evaluate_fn(server_round, arrays)))
                after.append(torch.get_num_threads())

        thread = threading.Thread(target=round_commits)
        thread.start()
        thread.join()
        # A count set in any thread is what torch gives threads started later: put this
        # process's back for the tests after this one.
        torch.set_num_threads(process_threads)
        return list(seen), after, scores

    threads, after, scores = two_rounds(sites_here=True)
    assert threads == [1, 2] and after == [2, 2]
    assert scores[0]["accuracy"] == scores[1]["accuracy"] and 0 < scores[0]["accuracy"] < 1
    assert scores[0]["loss"] == pytest.approx(scores[1]["loss"], rel=1e-6)
    # A deployment's sites train on their own nodes: the server's cores are its own.
    assert two_rounds(sites_here=False)[:2] == ([2, 2], [2, 2])


def test_a_site_process_freezes_its_modules_objects_at_its_first_site(tmp_path):
    """A site process (a Ray actor, a Flower ClientApp process) has loaded torch, Flower and
    the project by its first site: their objects are frozen then, once, and its garbage
    collections and exit skip them (``simulations.process_heap``)."""
    pickled = tmp_path / "resolver.pkl"
    pickled.write_bytes(pickle.dumps(_resolver(tmp_path)))
    code = (
        "import gc, pickle, sys\n"
        "from test_fixed_costs import _context\n"
        "resolver = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "before = gc.get_freeze_count()\n"
        "resolver(_context(0))\n"
        "first = gc.get_freeze_count()\n"
        "resolver(_context(1))\n"
        "print(before, first, gc.get_freeze_count())\n"
    )
    before, first, second = map(int, _in_a_fresh_process(code, pickled).split())
    assert before == 0 and first > 100_000 and second == first


def test_a_ray_worker_loads_the_site_modules_without_collecting_and_freezes_them(tmp_path):
    """A Ray worker's preload (``simulations.site_preload``) loads torch, Flower's client
    side and the site code with the collector paused: its full collections would walk the
    growing heap again and again (about 0.5 s of the imports). After it, their objects are
    frozen and the collector runs again, unless it was off before (the fork server, whose
    own pause ends after its imports)."""
    code = (
        "import gc, sys\n"
        "seen = []  # collections once torch began to load\n"
        "def on_collection(phase, info):\n"
        "    if phase == 'start' and 'torch' in sys.modules:\n"
        "        seen.append(info['generation'])\n"
        "gc.callbacks.append(on_collection)\n"
        "if sys.argv[1].endswith('off'):\n"
        "    gc.disable()\n"
        "from panoramia_fl.simulations import site_preload\n"
        "print(len(seen), gc.isenabled(), gc.get_freeze_count() > 100_000)\n"
    )
    assert _in_a_fresh_process(code, tmp_path / "on").split() == ["0", "True", "True"]
    assert _in_a_fresh_process(code, tmp_path / "off").split() == ["0", "False", "True"]


def test_a_site_process_trains_without_loading_torch_dynamo(tmp_path):
    """torch.optim's wrappers for ``torch.compile`` load ``torch._dynamo`` (1.4-2 CPU s)
    at a process's first optimizer; a site's training, plain and under DP-SGD, loads none
    (``ml.optimizers``)."""
    plain = _resolver(tmp_path / "plain")
    dp = _resolver(tmp_path / "dp", dp={"enabled": True, "noise_multiplier": 1.0})
    pickled = tmp_path / "resolvers.pkl"
    pickled.write_bytes(pickle.dumps([plain, dp]))
    code = (
        "import pickle, sys, torch\n"
        "from panoramia_fl.clients.privacy import AccountantHistory\n"
        "from panoramia_fl.clients.site_training import train_locally\n"
        "from test_fixed_costs import _context\n"
        "for resolver in pickle.loads(open(sys.argv[1], 'rb').read()):\n"
        "    site = resolver(_context(0))\n"
        "    history = AccountantHistory('rdp', []) if site.dp else None\n"
        "    train_locally(site.task, site.task.make_model().state_dict(),\n"
        "                  x=site.data.training_x, y=site.data.training_y, epochs=1, seed=0,\n"
        "                  device=torch.device('cpu'), dp=site.dp, accountant_history=history)\n"
        "    print(site.dp is not None, 'torch._dynamo' in sys.modules)\n"
    )
    assert _in_a_fresh_process(code, pickled).split() == ["False", "False", "True", "False"]


def test_a_site_process_imports_flowers_actor_without_the_engines_server_side(tmp_path):
    """A Ray worker's preload (``simulations.site_preload``) imports Flower's actor class
    without running ``flwr.simulation``'s ``__init__``, which imports the engine's server side
    (SQLAlchemy, 0.7-0.8 CPU s); the ``__init__`` runs, as it would have, at the first use of
    one of its names."""
    code = (
        "import sys\n"
        "from panoramia_fl.simulations import site_preload\n"
        "from flwr.simulation.ray_transport.ray_actor import ClientAppActor\n"
        "print('sqlalchemy' in sys.modules, 'flwr.simulation.app' in sys.modules)\n"
        "import flwr.simulation\n"
        "from flwr.simulation import run_simulation\n"
        "print(flwr.simulation.run_simulation is run_simulation, 'sqlalchemy' in sys.modules)\n"
        "try:\n"
        "    flwr.simulation.no_such_name\n"
        "except AttributeError:\n"
        "    print(site_preload.defer_simulation_package_init())\n"
    )
    seen = _in_a_fresh_process(code, tmp_path).split()
    assert seen == ["False", "False", "True", "True", "False"]


def test_a_dp_noise_multiplier_is_searched_once_per_run_in_a_site_process(tmp_path, monkeypatch):
    """Opacus's search for sigma (about a second of CPU) ran in every site's every round;
    now once for each declared size of the run's sites in a process, and again in a new run
    (whose settings may differ)."""
    from opacus.accountants import utils

    search, rates = utils.get_noise_multiplier, []

    def counted(**kwargs):
        rates.append(kwargs["sample_rate"])
        return search(**kwargs)

    monkeypatch.setattr(utils, "get_noise_multiplier", counted)
    resolver = _resolver(
        tmp_path,
        partition={"scheme": "iid", "num_sites": 2, "records_per_site": 400},
        dp={"enabled": True, "target_epsilon": 4.0},
    )
    sites = [resolver(_context(s)) for s in (0, 1)]
    assert sites[0].dp is sites[1].dp is not None  # one size: one policy object
    sigmas = set()
    for server_round in (1, 2):
        for site in sites:
            result = train_locally(
                site.task,
                site.task.make_model().state_dict(),
                x=site.data.training_x,
                y=site.data.training_y,
                epochs=1,
                seed=server_round,
                device=torch.device("cpu"),
                dp=site.dp,
                accountant_history=AccountantHistory("rdp", []),
            )
            sigmas.add(result.noise_multiplier)
    assert len(rates) == 1 and len(sigmas) == 1
    # Another run searches afresh, and finds the sigma every training above used.
    other = SiteResolver(resolver.config, resolver.meta, resolver.layout)(_context(0))
    assert other.dp is not None and other.dp.noise_for(rates[0]) in sigmas
    assert len(rates) == 2


def _engine_worker_stop_s() -> float:
    """Seconds Flower's own engine thread (``vce_api.worker``, waiting on an empty queue built
    as ``run_api`` builds it) takes to end once its stop event is set."""
    import time

    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.server.superlink.fleet.vce.metrics import VceMetrics

    stop = threading.Event()
    args = (vce_api.Queue(), vce_api.Queue(), {}, None, stop, VceMetrics())
    worker = threading.Thread(target=vce_api.worker, args=args, daemon=True)
    worker.start()
    time.sleep(0.2)  # inside its timed wait on the queue
    began = time.monotonic()
    stop.set()
    worker.join(timeout=5)
    return time.monotonic() - began


def test_flowers_engine_ends_soon_after_its_server_app():
    # Flower's engine threads wait up to 1 s on their queues before they see the stop: about
    # 0.8 s here without the poll (the wait began 0.2 s before the stop).
    from queue import Queue

    from flwr.server.superlink.fleet.vce import vce_api

    from panoramia_fl.simulations.engine_waits import prompt_engine

    takes_messages = vce_api.add_messages_to_queue
    with prompt_engine():
        with prompt_engine():  # a simulation inside another leaves the swaps to it
            pass
        assert _engine_worker_stop_s() < 0.5
    assert vce_api.Queue is Queue and vce_api.add_messages_to_queue is takes_messages


def _message_handover_s(sends: int) -> tuple[list[float], object]:
    """Seconds from the ServerApp's send (Flower's in-memory grid, on the link's state a
    simulation builds) until the engine's message-taking thread (``vce_api``'s, started as
    ``run_api`` starts it) has put the message on the sites' queue, for ``sends`` messages
    sent one at a time at random moments of its polling, in run 7 (task 11); and the link's
    state."""
    import random
    import time
    from queue import Queue

    from flwr.proto.task_pb2 import Task
    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.server.superlink.linkstate import LinkStateFactory
    from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
    from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NOOP_FEDERATION_ID
    from flwr.supercore.object_store import ObjectStoreFactory
    from flwr.supercore.run import Run
    from flwr.superlink.federation import NoOpFederationManager
    from flwr.superlink.grid import InMemoryGrid

    factory = LinkStateFactory(
        FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
    )
    state = factory.state()
    run = Run.create_empty(run_id=7)
    run.primary_task_id = 11
    run.federation_id = NOOP_FEDERATION_ID
    state.run_ids[run.run_id] = RunRecord(run=run)  # as run_simulation registers its run
    state.task_store[11] = Task(task_id=11, run_id=run.run_id)
    nodes = vce_api._register_nodes(num_nodes=2, state_factory=factory)
    grid = InMemoryGrid(state_factory=factory)
    grid.set_run(run)
    queue: Queue = Queue()
    stop = threading.Event()
    taker = threading.Thread(
        target=vce_api.add_messages_to_queue, args=(state, queue, nodes, stop), daemon=True
    )
    taker.start()
    rng = random.Random(0)
    handover = []
    for _ in range(sends):
        time.sleep(rng.uniform(0.0, 0.1))
        message = Message(
            content=RecordDict(), message_type=MessageType.TRAIN, dst_node_id=next(iter(nodes))
        )
        began = time.monotonic()
        grid.push_messages([message])
        queue.get(timeout=5)
        handover.append(time.monotonic() - began)
    stop.set()
    taker.join(timeout=5)
    return handover, state


def test_flowers_engine_hands_a_message_to_its_site_as_soon_as_it_is_sent(monkeypatch):
    # Flower's message-taking thread looks at the link's state every 0.1 s: a message sent
    # at a random moment waited 0.05 s on average, each round's instructions and each audit's.
    from flwr.common.constant import SUPERLINK_NODE_ID

    from panoramia_fl.simulations.engine_waits import prompt_engine

    # The ServerApp's identity in its process, as run_simulation sets it.
    for name, value in (("_run_id", 7), ("_node_id", SUPERLINK_NODE_ID), ("_task_id", 11)):
        monkeypatch.setattr(TaskIdentity, name, value)
    with prompt_engine():
        handover, state = _message_handover_s(10)
    assert sum(handover) / len(handover) < 0.02, handover
    assert "store_message_ins" not in vars(state)  # the state is as it was
