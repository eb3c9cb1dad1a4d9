"""The gradient-inversion audit (``audit.inversion``): can the server rebuild a site's records
from the site's update? The attack and its settings (:mod:`.attack`), and how close it came
to the site's true records (:mod:`.scores`)."""
