"""Total cost of ownership: owning GPU servers versus renting cloud GPUs, per training run and over N years.

Pure functions on frozen inputs (no web, database or plotting imports). Hardware, prices and the defaults of
every assumption come from :mod:`hardware_catalog`; every default is sourced there (``tco_defaults.yaml``) and
shown by :func:`assumption_table`. Formulas (``docs/tco.md`` has the long form)::

    capex          = server price x nodes + networking per node x nodes (multi-node only) + storage TB x $/TB
    load power     = GPUs x TDP + rest of the server                              (W per node, at load)
    average power  = GPUs x TDP x utilisation + rest of the server                (issue 4)
    power $/yr     = average kW x PUE x 8760 h x $/kWh
    colocation $/yr= load kW x $/kW/month x 12                                    (CBRE asking rate per kW)
    maintenance $/yr = maintenance % x capex ; staff $/yr as given
    N-year TCO     = capex + N x opex/yr          (cash; amortised: capex x min(N, life)/life + N x opex/yr)
    owned $/GPU-h  = (capex / life + opex/yr) / (GPUs x 8760 h x utilisation)     (per useful GPU-hour)
    cloud $/run    = $/GPU-h x GPUs x hours                                       (linear in hours)
    break-even     = capex / (cloud $/month - own opex $/month)                   (months)
    upgrade payback= (capex B - capex A) / (opex per run A - opex per run B)      (runs; set against the life)

Node power (GPU TDP, the server's own GPU SKU, peak and average) and rack planning live in
:mod:`estimator.facility.rack`, the one implementation shared with the estimate's host sizing.

The package: :mod:`~estimator.tco.assumptions` (the editable assumptions and their sourced defaults),
:mod:`~estimator.tco.results` (the job input and the frozen results), :mod:`~estimator.tco.costs` (the
formulas: owning, renting, break-even, the cost of one run) and :mod:`~estimator.tco.upgrade` ("A100 -> H100?").

A training job (:class:`JobCost`) comes from the step-time model: its time to train, GPU count and, optionally,
its energy. Money is in US dollars, energy in kWh, power in W or kW as named.
"""

from __future__ import annotations

from estimator.facility.rack import node_average_power_w as node_average_power_w
from estimator.facility.rack import node_power_at_load_w as node_power_at_load_w
from estimator.facility.rack import resolve_server as resolve_server
from estimator.tco import assumptions, costs, results, upgrade
from estimator.tco.assumptions import *  # noqa: F403 (the names are said once, in each submodule's __all__)
from estimator.tco.costs import *  # noqa: F403
from estimator.tco.results import *  # noqa: F403
from estimator.tco.upgrade import *  # noqa: F403

#: every public name of the submodules (each says its own in ``__all__``), and the rack's power helpers
__all__ = sorted({
    *assumptions.__all__, *costs.__all__, *results.__all__, *upgrade.__all__,
    "node_average_power_w", "node_power_at_load_w", "resolve_server",
})
