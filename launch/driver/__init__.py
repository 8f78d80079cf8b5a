"""The training driver: a run built from its config (``build``), its loop (``train``) and the parts the loop
drives (rollout pool, learner updates, sources, weights, checkpoints, the run log, driver stages)."""
