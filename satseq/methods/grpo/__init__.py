"""GRPO (DeepSeekMath, arXiv 2402.03300): the single-policy baseline (``method=grpo``)."""
