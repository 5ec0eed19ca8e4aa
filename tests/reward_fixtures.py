"""Custom reward functions used by tests through ``reward.custom=tests.reward_fixtures:NAME``."""


def length_parity(prompt: str, response: str, answer: str) -> float:
    """Varies inside every group, so advantages are non-zero even when no answer is right."""
    return float(len(response) % 2)


def char_code_sum(prompt: str, response: str, answer: str) -> float:
    """A reward in [0, 1] that differs between any two responses of different character codes' sum mod 97:
    a group of sampled responses almost never ties, so every stage's advantages are non-zero."""
    return (sum(map(ord, response)) % 97) / 96
