"""A server that does not play fair (``audit.adversary``): the weights it crafts, the records
it rebuilds from a site's update, and the share of the site's records that comes back.

The server keeps the agreed architecture and chooses the weights it sends:

* :func:`craft_imprint`: bins of one measurement in the first fully connected layer (Fowl
  et al. 2022); a bin holding one record gives it back exactly;
* :func:`craft_trap`: random rows shifted so that each unit fires for few records
  (Boenisch et al. 2023);
* :func:`craft_dead`: every ReLU dead on any record, so the site's update is zero (what the
  other sites receive in the inconsistency attack of Pasquini et al. 2022, under secure
  aggregation).

:func:`rebuild` reads the records from a gradient or a weight change; the site scores them
against its own records with :func:`rebuilt_share` (only that summary leaves it). Torch
only, no Flower; the scoring reuses :mod:`audit.inversion.scores`.
"""

from panoramia_fl.audit.adversary.attacks import ATTACKS, Craft
from panoramia_fl.audit.adversary.crafted import CraftedModel, SiteOptimizer
from panoramia_fl.audit.adversary.dead import craft_dead
from panoramia_fl.audit.adversary.imprint import craft_imprint
from panoramia_fl.audit.adversary.layers import AdversaryUnsupported
from panoramia_fl.audit.adversary.passthrough import PassThrough
from panoramia_fl.audit.adversary.rebuild import rebuild, update_of
from panoramia_fl.audit.adversary.share_rebuilt import RebuiltShare, rebuilt_share
from panoramia_fl.audit.adversary.trap import craft_trap

__all__ = [
    "ATTACKS",
    "AdversaryUnsupported",
    "Craft",
    "CraftedModel",
    "PassThrough",
    "RebuiltShare",
    "SiteOptimizer",
    "craft_dead",
    "craft_imprint",
    "craft_trap",
    "rebuild",
    "rebuilt_share",
    "update_of",
]
