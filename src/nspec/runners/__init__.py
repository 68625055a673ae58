"""Runners: everything that talks to providers and the file system during a run (submit, poll, collect, score,
report)."""
