"""Custom reward functions used by tests through ``reward.custom=tests.reward_fixtures:NAME``."""


def length_parity(prompt: str, response: str, answer: str) -> float:
    """Varies inside every group, so advantages are non-zero even when no answer is right."""
    return float(len(response) % 2)
