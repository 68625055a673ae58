"""RULER's task generators (NVIDIA/RULER, scripts/data/synthetic/): niah, variable tracking, common- and
frequent-word extraction, and QA, each rebuilt from RULER's own rules, templates and answer prefixes."""
