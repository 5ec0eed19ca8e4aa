"""The recipe's config loads in verl's Hydra config, verl's own checks accept it, and placed as the README
says (``verl/recipes/sat_seq``) verl's external_lib import registers the estimator and the losses."""
import pytest

pytest.importorskip("verl", reason="verl is installed in .venv-verl (make setup-verl)")

import os
import subprocess
import sys

from omegaconf import OmegaConf

from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

from conftest import RECIPE


def test_config_composes_on_verls_ppo_trainer(recipe_config):
    cfg = recipe_config
    assert cfg.algorithm.adv_estimator == "sat_seq" and cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "sat_seq"
    assert cfg.actor_rollout_ref.actor.clip_ratio_low == cfg.sat_seq.epsilon == 0.2
    assert cfg.actor_rollout_ref.rollout.n == cfg.sat_seq.group_size == 4
    assert cfg.actor_rollout_ref.model.external_lib == "recipes.sat_seq"
    assert [a.name for a in cfg.sat_seq.agents] == ["agent_1", "agent_2", "agent_3"]
    assert "rollout" in cfg.actor_rollout_ref and "critic" in cfg  # verl's own defaults are underneath
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert type(actor).__name__ == "FSDPActorConfig" and actor.policy_loss.ppo_kl_coef == 0.001
    algo = omega_conf_to_dataclass(cfg.algorithm)
    assert algo.kl_ctrl.target_kl == 0.05 and algo.gamma == 0.99
    assert not need_critic(cfg) and not need_reference_policy(cfg)
    validate_config(config=cfg, use_reference_policy=False, use_critic=False)


def test_placed_in_verl_recipes_external_lib_registers(tmp_path):
    """``cp -r recipes/sat_seq/verl <verl>/recipes/sat_seq``; a worker's import_external_libs(external_lib)."""
    (tmp_path / "recipes").mkdir()
    os.symlink(RECIPE, tmp_path / "recipes" / "sat_seq")
    code = (
        "from hydra import compose, initialize_config_dir\n"
        "from verl.utils.import_utils import import_external_libs\n"
        "from verl.trainer.ppo import core_algos\n"
        f"with initialize_config_dir(config_dir={str(tmp_path / 'recipes' / 'sat_seq' / 'config')!r}, version_base=None):\n"
        "    cfg = compose('sat_seq')\n"
        "assert 'sat_seq' not in core_algos.POLICY_LOSS_REGISTRY\n"
        "import_external_libs(cfg.actor_rollout_ref.model.external_lib)\n"
        "core_algos.get_adv_estimator_fn(cfg.algorithm.adv_estimator)\n"
        "print(sorted(k for k in core_algos.POLICY_LOSS_REGISTRY if k.startswith('sat_seq')))\n")
    env = {**os.environ, "PYTHONPATH": "", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "['sat_seq', 'sat_seq_product', 'sat_seq_token']"


def test_overrides_reach_the_sat_seq_section(recipe_config):
    cfg = OmegaConf.merge(recipe_config, OmegaConf.from_dotlist(["sat_seq.epsilon=0.1", "data.train_batch_size=16"]))
    OmegaConf.resolve(cfg)
    assert cfg.actor_rollout_ref.actor.clip_ratio_high == 0.1 and cfg.data.train_batch_size == 16


def test_train_dapo_knobs_compose(tmp_path):
    """train_dapo.sh's overrides (TRAIN_BATCH_SIZE, NUM_STAGES, AGENTk_PATH) are valid Hydra overrides."""
    from hydra import compose, initialize_config_dir

    shim = tmp_path / "python"
    shim.write_text('#!/bin/sh\nshift 2\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "TRAIN_BATCH_SIZE": "16", "NUM_STAGES": "5",
           "AGENT1_PATH": "/models/a one", "AGENT2_PATH": "org/model-b"}
    out = subprocess.run(["bash", os.path.join(RECIPE, "train_dapo.sh")], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    overrides = out.stdout.strip().splitlines()
    with initialize_config_dir(config_dir=os.path.join(RECIPE, "config"), version_base=None):
        cfg = compose("sat_seq", overrides=overrides)
    assert cfg.data.train_batch_size == 16 and cfg.trainer.total_training_steps == 5
    assert [(a.name, a.path) for a in cfg.sat_seq.agents] == [("agent_1", "/models/a one"), ("agent_2", "org/model-b")]
    assert cfg.actor_rollout_ref.model.external_lib == "recipes.sat_seq.verl"


def test_unknown_sat_seq_key_is_a_one_line_error(recipe_config):
    import pytest as _pytest

    from recipes.sat_seq.verl.stage_coordinator import agent_names
    from satseq.errors import ConfigError

    for dotted, value in (("sat_seq.epsilom", 0.1), ("sat_seq.agents.0.lr", 1.0), ("sat_seq.certificate.prompts", 8)):
        cfg = recipe_config.copy()
        OmegaConf.set_struct(cfg, False)
        OmegaConf.update(cfg, dotted, value, force_add=True)
        with _pytest.raises(ConfigError, match=f"unknown config key '{dotted}'"):
            agent_names(cfg.sat_seq)
    assert agent_names(recipe_config.sat_seq) == ["agent_1", "agent_2", "agent_3"]


def test_the_turn_reward_is_verls_custom_reward_function(recipe_config):
    """reward.custom_reward_function (set by train_dapo.sh to real_controller.py) loads through verl's
    get_custom_reward_fn and scores a turn with satseq's answer check."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = recipe_config.copy()
    cfg.reward.custom_reward_function.path = os.path.join(RECIPE, "real_controller.py")
    fn = get_custom_reward_fn(cfg)
    assert fn(data_source="dapo", solution_str="so the answer is \\boxed{12}", ground_truth="12") == 1.0
    assert fn(data_source="dapo", solution_str="so the answer is \\boxed{13}", ground_truth="12") == 0.0


def test_verls_rollout_correction_is_refused(recipe_config):
    from recipes.sat_seq.verl.stage_coordinator import SatSeqStageDriver
    from satseq.errors import ConfigError

    cfg = recipe_config.copy()
    cfg.algorithm.rollout_correction.rollout_is = "token"
    try:
        SatSeqStageDriver(cfg, ops=None)
    except ConfigError as e:
        assert "algorithm.rollout_correction" in str(e)
    else:
        raise AssertionError("rollout_correction with sat_seq was accepted")
    SatSeqStageDriver(recipe_config, ops=None)


def test_the_pins_agree_with_the_installed_verl():
    """REQUIRED_VERL.txt's VERL_VERSION = requirements-cpu.txt's pin = the verl make setup-verl installed."""
    import verl

    with open(os.path.join(RECIPE, "REQUIRED_VERL.txt")) as f:
        keys = dict(line.strip().split("=", 1) for line in f if "=" in line and not line.startswith("#"))
    with open(os.path.join(RECIPE, "requirements-cpu.txt")) as f:
        pins = [line.strip() for line in f if line.startswith("verl==")]
    assert pins == [f"verl=={keys['VERL_VERSION']}"] and keys["PIP_INSTALL"] == f"pip install {pins[0]}"
    assert verl.__version__ == keys["VERL_VERSION"]
