"""The reward of one agent turn, as verl's custom reward function (the seed's ``real_controller.py``).

The seed says: to change the reward, edit ``_compute_reward()`` in ``real_controller.py``. verl calls a
``compute_score(data_source, solution_str, ground_truth, extra_info)`` named by
``reward.custom_reward_function.{path,name}`` (set in ``config/sat_seq.yaml``); this one is satseq's
answer check (``satseq.rewards.grade.correctness_reward``: 1.0 when the response's final answer equals
the ground truth, else 0.0). Edit :func:`_compute_reward`, or point the config at your own function.
"""
from __future__ import annotations

from typing import Any, Optional

from satseq.rewards.grade import correctness_reward


def _compute_reward(prompt: Optional[str], response: str, answer: Optional[str]) -> float:
    """Reward of one agent turn (the seed's customisation point)."""
    return correctness_reward(response, answer)


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Optional[dict] = None,
                  **_: Any) -> float:
    """verl's custom reward function contract."""
    prompt = (extra_info or {}).get("question") if isinstance(extra_info, dict) else None
    return _compute_reward(prompt, solution_str, None if ground_truth is None else str(ground_truth))
