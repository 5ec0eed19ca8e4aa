"""SAT-Seq's quantile-KL check with backtracking, for agents that live in verl worker groups."""
