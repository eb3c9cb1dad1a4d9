"""Library functions swapped for a while: arguments changed by name, also one swap inside
another of the same function (Ray's raylet start: its workers' command and environment)."""

from __future__ import annotations

import inspect
import types

from panoramia_fl.simulations.swapped import swapped_arguments


def start(command: str, worker: str, env: dict | None = None) -> tuple[str, str, dict]:
    return command, worker, env or {}


def test_arguments_are_changed_by_name_inside_another_swap_and_restored():
    library = types.SimpleNamespace(start=start)

    def forked(call: inspect.BoundArguments) -> None:
        call.arguments["worker"] = "fork_request.py"

    def threads(call: inspect.BoundArguments) -> None:
        call.arguments["env"] = {**(call.arguments.get("env") or {}), "OMP_NUM_THREADS": "1"}

    with swapped_arguments(library, "start", threads), swapped_arguments(library, "start", forked):
        by_position = library.start("raylet", "default_worker.py")
        by_keyword = library.start(command="raylet", worker="default_worker.py", env={"A": "b"})
    assert by_position == ("raylet", "fork_request.py", {"OMP_NUM_THREADS": "1"})
    assert by_keyword == ("raylet", "fork_request.py", {"A": "b", "OMP_NUM_THREADS": "1"})
    assert library.start is start
