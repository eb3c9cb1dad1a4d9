"""What a run pays once per process: a site process builds each site once, however often
Flower hands it the ClientApp."""

from __future__ import annotations

import pickle

from flwr.app import Context, RecordDict

from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.simulations.apps import SiteResolver
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.run_dir import prepare_run_dir


def _context(site_id: int) -> Context:
    return Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": site_id},
        state=RecordDict(),
        run_config={},
    )


def test_a_site_is_built_once_per_process_though_each_message_brings_a_copy(tmp_path):
    config = validate_config(
        {
            "name": "built-once",
            "data": {"name": "digits"},
            "partition": {"scheme": "iid", "num_sites": 2},
            "audit": {"enabled": False},
        }
    )
    layout = RunLayout(tmp_path / "run")
    meta = prepare_run_dir(config, layout)
    resolver = SiteResolver(config, meta, layout)
    # Flower's simulation sends the ClientApp, and the resolver in it, pickled with every
    # message: each round's copy arrives with whatever the driver's instance holds.
    first, second = (pickle.loads(pickle.dumps(resolver)) for _ in range(2))
    site = first(_context(1))
    assert site.site_id == 1 and len(site.data.train_x) > 0
    assert second(_context(1)) is site
    assert second(_context(0)) is not site
    # Another run's resolver in the same process builds its own sites.
    assert SiteResolver(config, meta, layout)(_context(1)) is not site
