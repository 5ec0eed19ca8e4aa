"""SAT-Seq truncated importance reweighting."""
