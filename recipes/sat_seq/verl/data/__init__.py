"""SAT-Seq's truncated importance weights between agents, as verl's per-token rollout_is_weights."""
