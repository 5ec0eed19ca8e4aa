"""Rewards: final-answer extraction, equivalence grading (math-verify, with a timeout), custom rewards."""
from satseq.rewards.extract import (
    extract_answer,
    extract_boxed,
    last_number,
    normalize_answer,
    parse_gsm8k_answer,
)
from satseq.rewards.grade import (
    MAX_ANSWER_CHARS,
    correctness_reward,
    grading_timeout,
    is_equivalent,
    load_custom_reward,
    set_grading_timeout,
    timeout_count,
)

__all__ = [
    "extract_answer",
    "extract_boxed",
    "last_number",
    "normalize_answer",
    "parse_gsm8k_answer",
    "MAX_ANSWER_CHARS",
    "correctness_reward",
    "is_equivalent",
    "load_custom_reward",
    "set_grading_timeout",
    "grading_timeout",
    "timeout_count",
]
