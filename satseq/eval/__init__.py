"""Evaluation: pass@k, avg@k, maj@k, the relay's majority vote, and summaries with standard errors."""
from satseq.eval.metrics import avg_at_k, maj_at_k, majority_vote, pass_at_k, problem_metrics, summarize

__all__ = ["avg_at_k", "maj_at_k", "majority_vote", "pass_at_k", "problem_metrics", "summarize"]
