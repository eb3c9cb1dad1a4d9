"""panoramia-fl: federated-learning simulations with per-site PANORAMIA privacy audits.

The one name the project installs. Its packages keep their folders at the top of the
repository (``audit/``, ``server/``, ...); each entry of this folder is a link to one of them,
and the links are the project's package list: setuptools, mypy and the layout test read it
from here.
"""

from pathlib import Path

# `flwr build` skips links: a Flower app bundle carries the package folders beside this one
# (`fab-include` in pyproject.toml), so there they are found one level up.
if not Path(__file__).with_name("contracts").is_dir():
    __path__.append(str(Path(__file__).resolve().parent.parent))
