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

Node power (GPU TDP, the server's own GPU SKU, peak and average) and rack planning live in :mod:`estimator.rack`,
the one implementation shared with the estimate's host sizing.

The package: :mod:`~estimator.tco.assumptions` (the editable assumptions and their sourced defaults),
:mod:`~estimator.tco.results` (the job input and the frozen results), :mod:`~estimator.tco.costs` (the
formulas: owning, renting, break-even, the cost of one run) and :mod:`~estimator.tco.upgrade` ("A100 -> H100?").

A training job (:class:`JobCost`) comes from the step-time model: its time to train, GPU count and, optionally,
its energy. Money is in US dollars, energy in kWh, power in W or kW as named.
"""

from __future__ import annotations

from estimator.rack import node_average_power_w, node_power_at_load_w, resolve_server
from estimator.tco.assumptions import (
    HOURS_PER_MONTH,
    HOURS_PER_YEAR,
    AssumptionRow,
    TcoAssumptions,
    assumption_table,
)
from estimator.tco.costs import (
    annual_opex,
    break_even_month,
    capex,
    cloud_cost_usd,
    cloud_offers_for,
    cloud_tco,
    compare_job,
    cumulative_costs,
    job_cost_cloud,
    job_cost_owned,
    offer_name,
    own_vs_cloud,
    own_vs_cloud_headline,
    own_vs_cloud_or_note,
    ownership_tco,
    ownership_tco_option,
    power_cost_usd,
    server_price,
    tco_options,
)
from estimator.tco.results import (
    MAX_TIME_TO_TRAIN_S,
    CapexBreakdown,
    CumulativeCost,
    JobCost,
    OpexBreakdown,
    OwnershipTco,
    OwnVsCloud,
    RunCost,
    TcoOption,
)
from estimator.tco.upgrade import UpgradeAnswer, compare_upgrade

__all__ = [
    "HOURS_PER_MONTH",
    "HOURS_PER_YEAR",
    "MAX_TIME_TO_TRAIN_S",
    "AssumptionRow",
    "CapexBreakdown",
    "CumulativeCost",
    "JobCost",
    "OpexBreakdown",
    "OwnVsCloud",
    "OwnershipTco",
    "RunCost",
    "TcoAssumptions",
    "TcoOption",
    "UpgradeAnswer",
    "annual_opex",
    "assumption_table",
    "break_even_month",
    "capex",
    "cloud_cost_usd",
    "cloud_offers_for",
    "cloud_tco",
    "compare_job",
    "compare_upgrade",
    "cumulative_costs",
    "job_cost_cloud",
    "job_cost_owned",
    "node_average_power_w",
    "node_power_at_load_w",
    "offer_name",
    "own_vs_cloud",
    "own_vs_cloud_headline",
    "own_vs_cloud_or_note",
    "ownership_tco",
    "ownership_tco_option",
    "power_cost_usd",
    "resolve_server",
    "server_price",
    "tco_options",
]
