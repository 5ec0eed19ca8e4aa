"""SAT-Seq quantile KL check with backtracking."""
