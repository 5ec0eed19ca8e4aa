"""SAT-Seq sequence-ratio policy loss."""
