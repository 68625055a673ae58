"""nspec's version: one place, which the package metadata and the run folders it writes read."""

__version__ = "0.1.0"
