"""SAT-Seq's sequence-aware advantage in verl's advantage-estimator registry."""
