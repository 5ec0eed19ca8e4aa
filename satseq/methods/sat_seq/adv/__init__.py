"""SAT-Seq sequence-aware turn-level advantages."""
