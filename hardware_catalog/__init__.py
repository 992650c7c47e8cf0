"""capplan hardware catalog: GPUs, servers, interconnects, storage, cloud offers and TCO defaults.

Pure data and one validating loader; no web, database or plotting imports. Every figure carries its source and
date; ``uncertain`` lists the figures where sources disagree. Load it with :func:`load_catalog`.
"""

from hardware_catalog.loader import (
    DEFAULT_DATA_DIR,
    Cable,
    Catalog,
    CatalogError,
    CloudOffer,
    Collective,
    CollectiveMeasurement,
    Gpu,
    Interconnect,
    Nic,
    Optic,
    Server,
    Source,
    StorageClass,
    Switch,
    TcoDefault,
    TcoDefaults,
    UnknownCatalogIdError,
    load_catalog,
)

__all__ = [
    "DEFAULT_DATA_DIR",
    "Cable",
    "Catalog",
    "CatalogError",
    "CloudOffer",
    "Collective",
    "CollectiveMeasurement",
    "Gpu",
    "Interconnect",
    "Nic",
    "Optic",
    "Server",
    "Source",
    "StorageClass",
    "Switch",
    "TcoDefault",
    "TcoDefaults",
    "UnknownCatalogIdError",
    "load_catalog",
]
