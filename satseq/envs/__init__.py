"""Environments: what an episode is (its roles, turns, reward), apart from how an algorithm learns from it."""
