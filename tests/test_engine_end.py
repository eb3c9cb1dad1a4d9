"""Flower's Simulation Engine stopped while a site's call is in progress: the engine's
threads end before Ray shuts down (:mod:`simulations.engine_end`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[1]

# A simulation whose one site takes its time over a round, on the session's Ray head (its
# site is killed at once by the stop; an engine that failed to would hold the head's one CPU
# for the round's minute). Interrupted, it says which of the engine's threads are still there
# once the engine has ended.
SIMULATION = """
import json, os, sys, threading, time
from pathlib import Path

from flwr.app import Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp
from flwr.simulation import run_simulation

from panoramia_fl.simulations.engine_end import site_calls_ended_first
from panoramia_fl.simulations.engine_waits import prompt_engine

training = Path(sys.argv[1])
client = ClientApp()


@client.train()
def train(msg, context):
    training.write_text(str(os.getpid()))
    time.sleep(60)  # a long round
    return Message(RecordDict(), reply_to=msg)


server = ServerApp()


@server.main()
def main(grid, context):
    while not (nodes := list(grid.get_node_ids())):
        time.sleep(0.05)
    grid.send_and_receive([Message(RecordDict(), dst_node_id=nodes[0], message_type="train")])


try:
    with prompt_engine(), site_calls_ended_first():
        run_simulation(
            server_app=server,
            client_app=client,
            num_supernodes=1,
            backend_config={
                "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                "init_args": json.loads(sys.argv[2]),
            },
        )
except KeyboardInterrupt:
    engine = [t.name for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor")]
    print(json.dumps({"engine_threads": engine}), flush=True)
    os._exit(130)  # a thread left behind would keep a normal exit waiting for good
os._exit(0)
"""


def test_an_engine_stopped_mid_call_ends_its_threads_before_ray(tmp_path, ray_init_args):
    """SIGINT to the simulation's process alone (the site's actor trains on, as under a
    SIGTERM to the run): the engine's call to the site ends, and its thread with it, before
    Ray shuts down; otherwise the thread waits for a reply for good, and one whose call ends
    during the shutdown makes Ray end the whole process with status 1."""
    script, training = tmp_path / "simulation.py", tmp_path / "training"
    script.write_text(SIMULATION)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(training), json.dumps(ray_init_args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while not training.exists():
            assert proc.poll() is None, proc.communicate()[1][-4000:]
            assert time.time() < deadline, "the site never started its round"
            time.sleep(0.05)
        stopped = time.time()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-4000:]
    assert json.loads(out.splitlines()[-1]) == {"engine_threads": []}, err[-4000:]
    assert time.time() - stopped < 20  # the site's round had 60 s to go
