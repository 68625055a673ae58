"""Task families: each turns a spec's parameters, seeded draws and a target length into cells."""
