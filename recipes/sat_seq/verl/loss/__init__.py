"""SAT-Seq's sequence-ratio loss in verl's policy-loss registry."""
