"""The recipe's CPU tests run in .venv-verl (make test-verl); without verl each module skips itself
(``pytest.importorskip("verl")`` at its top)."""
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
if ROOT not in sys.path:  # the recipe imports as recipes.sat_seq.verl from this repository
    sys.path.insert(0, ROOT)
RECIPE = os.path.join(ROOT, "recipes", "sat_seq", "verl")


def pytest_collection_modifyitems(items):
    for item in items:
        if str(item.fspath).startswith(os.path.dirname(__file__)):
            item.add_marker(pytest.mark.verl)


@pytest.fixture(scope="session")
def recipe_config():
    """The recipe's config/sat_seq.yaml composed on verl's ppo_trainer (Hydra)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.join(RECIPE, "config"), version_base=None):
        return compose("sat_seq", overrides=["actor_rollout_ref.model.path=unused"])
