"""JSON Schemas shipped with nspec (a package so importlib.resources finds them in editable installs too)."""
