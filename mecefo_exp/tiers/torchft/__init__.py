"""cluster=torchft: one process per worker, who is alive from torchft's quorum, a restarted worker
healed from a live peer. `tier` is what the loop sees, `membership` the quorum and heal, `network`
the addresses and stores, `launcher` and `machines` the processes on each machine, `checks` its
settings. docs/TORCHFT.md tells how it fits together."""
