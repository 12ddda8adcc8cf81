"""Model catalog: ids, tasks, artifacts, limits and prices."""

from cirrus.catalog.catalog import DEFAULT_MODEL, Catalog, CatalogEntry, CatalogError, load_catalog
from cirrus.catalog.spec import ArtifactRef, ModelSpec, Pricing

__all__ = [
    "DEFAULT_MODEL",
    "ArtifactRef",
    "Catalog",
    "CatalogEntry",
    "CatalogError",
    "ModelSpec",
    "Pricing",
    "load_catalog",
]
