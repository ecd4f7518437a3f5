"""mecefo-exp's Hydra sweeper (Hydra loads sweepers only from the hydra_plugins namespace)."""
