"""The spec language: reading YAML with locations, the JSON Schema, semantic checks, includes and defaults."""

from nspec.spec.loader import LoadedSpec, load_spec, located_cells
from nspec.spec.schema import schema_path, spec_schema

__all__ = ["LoadedSpec", "load_spec", "located_cells", "schema_path", "spec_schema"]
