"""SAT-Seq: sequence-aware block-coordinate tuning of K LLM agents (spec ``sat_seq.md``).

Layout follows the seed recipe: ``adv/seqaware`` (turn-level GAE with group baselines),
``loss/seq_ratio_loss`` (sequence-ratio clipped loss with truncated IS and KL),
``data/reweighting`` (truncated IS factor c), ``kl/quantile_kl_ctrl`` (quantile KL check with
backtracking), ``monitor/certificate`` (PAC lower bound), ``agent_scheduler`` (update order).
Kept import-light: import the submodules you need.
"""
