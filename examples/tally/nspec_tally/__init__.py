"""A task family, a scorer and a metric of one's own for needlespec: `tally` asks a model to add up the crates of
one good in a long ledger of deliveries, `count_error` grades the total it gives by how far it is off, and
`within_tenth` reports the share of answers within a tenth of the truth."""
