"""The compiler: from a validated spec to cells and provider request files. Pure: no network, no clock, no global
state; randomness only from generators seeded by the spec."""
