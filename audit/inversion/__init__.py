"""The gradient-inversion audit (``audit.inversion``): can the server rebuild a site's records
from the site's update? The attack and its settings (:mod:`.attack`)."""
