"""MLMT-RL (spec ``mlmt.md``): a trained coach and a solver in a three-turn loop."""
