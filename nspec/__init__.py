"""needlespec: long-context retrieval benchmarks as YAML specs, compiled into provider batch files."""

__version__ = "0.1.0"
