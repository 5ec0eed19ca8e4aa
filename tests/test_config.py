"""Config schema and loader: the seed's YAML loads unchanged; overrides; one-line errors."""
from __future__ import annotations

from pathlib import Path

import pytest

from satseq.config import TrainConfig, dump_config, load_config, save_config
from satseq.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]

# The block under "## Configuration" of the seed's README, verbatim.
SEED_YAML = """\
algorithm:
  gamma: 0.99              # Discount factor for return computation
  lam: 0.95                # GAE lambda parameter
  kl_ctrl:
    kl_coef: 0.001         # Initial KL penalty coefficient β
    target_kl: 0.05        # Target KL divergence threshold δ
    quantile: 0.99         # Quantile level for KL measurement (1-α)

sat_seq:
  epsilon: 0.2             # PPO clipping parameter ε
  A_clip: 5.0              # Advantage clipping threshold
  group_size: 4            # Responses per prompt for aggregation
  max_backtracks: 5        # Maximum backtracking iterations per update
  agents:
    - {name: agent_1, path: "path/to/model_1"}
    - {name: agent_2, path: "path/to/model_2"}
    - {name: agent_3, path: "path/to/model_3"}
"""


def _write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_seed_yaml_loads_unchanged(tmp_path):
    cfg = load_config(_write(tmp_path, SEED_YAML))
    assert cfg.algorithm.gamma == 0.99 and cfg.algorithm.lam == 0.95
    assert cfg.algorithm.kl_ctrl.kl_coef == 0.001
    assert cfg.algorithm.kl_ctrl.target_kl == 0.05
    assert cfg.algorithm.kl_ctrl.quantile == 0.99
    s = cfg.sat_seq
    assert (s.epsilon, s.A_clip, s.group_size, s.max_backtracks) == (0.2, 5.0, 4, 5)
    assert [a.name for a in s.agents] == ["agent_1", "agent_2", "agent_3"]
    assert [cfg.agent_path(a) for a in s.agents] == [f"path/to/model_{k}" for k in (1, 2, 3)]
    assert all(a.trainable for a in s.agents)
    # Everything else is the defaults.
    assert cfg.trainer == TrainConfig().trainer and cfg.model == TrainConfig().model


def test_shipped_recipe_loads(tmp_path):
    path = REPO / "recipes" / "sat_seq" / "config" / "sat_seq.yaml"
    cfg = load_config(path)
    assert [a.name for a in cfg.sat_seq.agents] == ["agent_1", "agent_2", "agent_3"]
    assert all(cfg.agent_path(a) == "embedded" for a in cfg.sat_seq.agents)
    assert cfg.sat_seq.A_clip == 5.0 and cfg.algorithm.kl_ctrl.quantile == 0.99
    # Same keys as the seed block: only the agent paths differ.
    seed = load_config(_write(tmp_path, SEED_YAML))
    assert dump_config(seed)["algorithm"] == dump_config(cfg)["algorithm"]
    a, b = dump_config(seed)["sat_seq"], dump_config(cfg)["sat_seq"]
    a.pop("agents"), b.pop("agents")
    assert a == b


def test_defaults():
    cfg = load_config(None)
    assert cfg == TrainConfig()
    assert cfg.run_dir == Path("outputs") / "sat_seq_dapo"
    assert cfg.method == "sat_seq" and cfg.model.path == "embedded"
    assert [a.name for a in cfg.sat_seq.agents] == ["agent_1", "agent_2", "agent_3"]
    assert cfg.agent_path(0) == "embedded" and cfg.agent_path("agent_2") == "embedded"
    assert cfg.model.lora.enabled == "auto"
    assert cfg.model.lora.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]


def test_every_field_documented():
    from pydantic import BaseModel

    def walk(model):
        for name, f in model.model_fields.items():
            assert f.description, f"{model.__name__}.{name} has no description"
            ann = f.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann)

    walk(TrainConfig)


def test_overrides_nested_list_and_types(tmp_path):
    cfg = load_config(
        _write(tmp_path, SEED_YAML),
        [
            "sat_seq.epsilon=0.1",
            "algorithm.kl_ctrl.quantile=0.9",
            "sat_seq.agents.0.path=/models/a",
            "sat_seq.agents.2.trainable=false",
            "trainer.num_stages=3",
            "model.lora.enabled=true",
            "model.lora.target_modules=[q_proj, v_proj]",
            'rollout.stop=["\\n\\n"]',
            "sat_seq.lr=1e-5",
            "model.gguf_file=model.gguf",
            "run_name=2024",
        ],
    )
    assert cfg.sat_seq.epsilon == 0.1
    assert cfg.algorithm.kl_ctrl.quantile == 0.9
    assert cfg.agent_path(0) == "/models/a" and cfg.agent_path(1) == "path/to/model_2"
    assert cfg.sat_seq.agents[2].trainable is False
    assert cfg.trainer.num_stages == 3 and isinstance(cfg.trainer.num_stages, int)
    assert cfg.model.lora.enabled is True
    assert cfg.model.lora.target_modules == ["q_proj", "v_proj"]
    assert cfg.rollout.stop == ["\n\n"]
    assert cfg.sat_seq.lr == pytest.approx(1e-5)
    assert cfg.model.gguf_file == "model.gguf"
    assert cfg.run_name == "2024"


def test_override_list_index_without_file_uses_defaults():
    cfg = load_config(None, ["sat_seq.agents.1.path=/x", "sat_seq.agents.3.name=agent_4"])
    assert [a.name for a in cfg.sat_seq.agents] == ["agent_1", "agent_2", "agent_3", "agent_4"]
    assert cfg.agent_path(1) == "/x" and cfg.agent_path(0) == "embedded"


@pytest.mark.parametrize(
    "override, needle",
    [
        ("sat_seq.foo=1", "unknown config key 'sat_seq.foo'"),
        ("foo.bar=1", "unknown config key 'foo'"),
        ("sat_seq.agents.0.colour=red", "unknown config key 'sat_seq.agents.0.colour'"),
        ("sat_seq.epsilom=0.1", "did you mean 'sat_seq.epsilon'"),
    ],
)
def test_unknown_override_key(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    msg = str(e.value)
    assert needle in msg and "\n" not in msg
    assert override in msg  # says where it came from


def test_unknown_key_in_file(tmp_path):
    p = _write(tmp_path, SEED_YAML + "  foo: 3\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'sat_seq.foo' \(in .*cfg.yaml\)"):
        load_config(p)
    p = _write(tmp_path, "trainr:\n  num_stages: 3\n", "b.yaml")
    with pytest.raises(ConfigError, match=r"unknown config key 'trainr'.*did you mean 'trainer'"):
        load_config(p)


@pytest.mark.parametrize(
    "override, key",
    [
        ("sat_seq.epsilon=abc", "sat_seq.epsilon"),
        ("trainer.num_stages=2.5", "trainer.num_stages"),
        ("trainer.num_stages=0", "trainer.num_stages"),
        ("sat_seq.group_size=0", "sat_seq.group_size"),
        ("algorithm.kl_ctrl.quantile=1.0", "algorithm.kl_ctrl.quantile"),
        ("algorithm.kl_ctrl.quantile=0", "algorithm.kl_ctrl.quantile"),
        ("method=ppo", "method"),
        ("model.lora.enabled=maybe", "model.lora.enabled"),
        ("sat_seq.agents.1.name=agent_1", "sat_seq.agents"),
        ("sat_seq.agents=[]", "sat_seq.agents"),
        ("sat_seq.agents.0.trainable=[1]", "sat_seq.agents.0.trainable"),
    ],
)
def test_ill_typed_names_key(override, key):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    msg = str(e.value)
    assert msg.startswith(f"config key '{key}': "), msg
    assert "\n" not in msg


def test_ill_typed_message_shape():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["sat_seq.epsilon=abc"])
    msg = str(e.value)
    assert msg.startswith("config key 'sat_seq.epsilon': Input should be a valid number")
    assert msg.endswith("(got 'abc')")


def test_ill_typed_in_file(tmp_path):
    p = _write(tmp_path, SEED_YAML.replace("epsilon: 0.2", "epsilon: abc"))
    with pytest.raises(ConfigError, match=r"cfg\.yaml:10: config key 'sat_seq.epsilon': .*'abc'"):
        load_config(p)


def test_override_without_equals_and_bad_index():
    with pytest.raises(ConfigError, match="sat_seq.epsilon.*key=value"):
        load_config(None, ["sat_seq.epsilon"])
    with pytest.raises(ConfigError, match="index 7 out of range"):
        load_config(None, ["sat_seq.agents.7.path=/x"])
    with pytest.raises(ConfigError, match="is a list"):
        load_config(None, ["sat_seq.agents.first.path=/x"])
    with pytest.raises(ConfigError, match="single value"):
        load_config(None, ["sat_seq.epsilon.x=1"])


def test_yaml_syntax_error_reports_file_line(tmp_path):
    p = _write(tmp_path, "sat_seq:\n  epsilon: 0.2\n  agents: [\n  bad: : x\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:4: invalid YAML"), msg
    assert "\n" not in msg


def test_top_level_must_be_mapping(tmp_path):
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(_write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(_write(tmp_path, "just a string\n", "s.yaml"))


def test_empty_file_is_defaults(tmp_path):
    assert load_config(_write(tmp_path, "# nothing\n")) == TrainConfig()


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


def test_save_load_round_trip(tmp_path):
    cfg = load_config(_write(tmp_path, SEED_YAML), ["trainer.num_stages=7", "model.lora.enabled=false",
                                                    "rollout.stop=[END]", "sat_seq.scheduler=greedy"])
    out = tmp_path / "run" / "train_config.yaml"
    save_config(cfg, out)
    assert out.exists() and not list(out.parent.glob(".*.tmp"))
    again = load_config(out)
    assert again == cfg
    assert dump_config(again) == dump_config(cfg)
    assert "A_clip" in dump_config(cfg)["sat_seq"]


def test_retired_certificate_key_in_an_old_run_config_still_loads(tmp_path):
    """train_config.yaml files from before the certificate was reworked hold sat_seq.certificate.w_max."""
    old = tmp_path / "train_config.yaml"
    old.write_text("sat_seq:\n  certificate:\n    delta: 0.1\n    w_max: 2.0\n")
    cfg = load_config(old)
    assert cfg.sat_seq.certificate.delta == 0.1
    with pytest.raises(ConfigError, match="w_max"):
        load_config(None, ["sat_seq.certificate.w_max=2"])  # naming it is still an unknown key


# ------------------------------------------------------------------ the shared ppo section (issue 36)
PPO_KEYS = ("epsilon_low", "epsilon_high", "kl_coef", "loss_agg_mode", "policy_loss", "ppo_epochs", "mini_batch_size", "lr")


@pytest.mark.parametrize("leaf", PPO_KEYS)
def test_a_key_left_in_grpo_names_its_new_place(leaf):
    with pytest.raises(ConfigError) as e:
        load_config(None, ["method=pag", f"grpo.{leaf}=1"])
    assert str(e.value) == f"config key 'grpo.{leaf}' moved to 'ppo.{leaf}' (from override 'grpo.{leaf}=1')"


def test_a_moved_key_in_a_file_names_its_line(tmp_path):
    path = _write(tmp_path, "method: mlmt\ngrpo:\n  group_size: 2\n  kl_coef: 0.01\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}:4: config key 'grpo.kl_coef' moved to 'ppo.kl_coef'"
    assert "\n" not in str(e.value)


def test_the_cli_refuses_a_moved_key_before_writing_anything(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "satseq.cli", "train", "method=grpo", "grpo.epsilon_high=0.28",
                        f"output_dir={tmp_path / 'out'}"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == ("error: config key 'grpo.epsilon_high' moved to 'ppo.epsilon_high' "
                                                 "(from override 'grpo.epsilon_high=0.28')")
    assert not (tmp_path / "out").exists()


def test_ppo_holds_the_clipped_update_of_grpo_pag_and_mlmt():
    from satseq.registry import get_method
    from satseq.update.clipped_pg import PGSettings

    for m in ("grpo", "pag", "mlmt"):
        assert "ppo" in get_method(m).sections
        cfg = load_config(None, [f"method={m}", "ppo.lr=1e-2", "ppo.epsilon_high=0.3", "ppo.mini_batch_size=4"])
        s = PGSettings.from_config(cfg)
        assert (cfg.ppo.lr, s.clip_high, s.mini_batch_size) == (1e-2, 0.3, 4)
    for m in ("sat_seq", "simultaneous", "apo"):
        assert "ppo" not in get_method(m).sections
    # the defaults are the old grpo section's
    d = TrainConfig(method="grpo").ppo
    assert (d.epsilon_low, d.epsilon_high, d.kl_coef, d.loss_agg_mode, d.policy_loss, d.ppo_epochs, d.mini_batch_size,
            d.lr) == (0.2, 0.2, 0.0, "seq-mean-token-mean", "ppo", 1, 64, 3e-5)


def test_a_run_config_saved_before_the_move_still_loads(tmp_path):
    """``satseq eval`` / compare's baselines read a run's own train_config.yaml, which an earlier
    version wrote with the update's keys under grpo: they are read at their new place."""
    old = tmp_path / "train_config.yaml"
    old.write_text("method: mlmt\ngrpo:\n  group_size: 2\n  lr: 0.01\n  kl_coef: 0.001\n  epsilon_high: 0.28\n")
    cfg = load_config(old, [], saved=True)
    assert (cfg.grpo.group_size, cfg.ppo.lr, cfg.ppo.kl_coef, cfg.ppo.epsilon_high) == (2, 0.01, 0.001, 0.28)
    with pytest.raises(ConfigError, match="moved to 'ppo.lr'"):
        load_config(old)  # as a user's config: refused
    with pytest.raises(ConfigError, match="moved to 'ppo.lr' \\(from override"):
        load_config(old, ["grpo.lr=1"], saved=True)  # an override still is


def test_a_config_unpickles_where_a_test_files_method_is_unknown(tmp_path):
    """A config pickled where a method defined outside satseq (here, this test file) has registered its
    section is unpickled by a process that never imported that file (a Ray actor): the section travels
    only with runs of that method."""
    import pickle
    import subprocess
    import sys

    from pydantic import Field

    from satseq.config.section import Section
    from satseq.methods.base import Method
    from satseq.registry import register_method

    class PickleToyConfig(Section):
        knob: int = Field(3, description="a setting only this test's method reads")

    @register_method
    class PickleToy(Method):
        name = "pickle_toy"
        config_section = ("pickle_toy", PickleToyConfig, "a test file's method")

    from satseq.registry import METHODS

    try:
        cfg = load_config(None, ["method=grpo", "ppo.lr=0.002"])
        assert cfg.pickle_toy.knob == 3  # mounted here
        blob = tmp_path / "cfg.pkl"
        blob.write_bytes(pickle.dumps(cfg))
        again = pickle.loads(blob.read_bytes())  # here, where the section exists, it comes back at its default
        assert again.pickle_toy.knob == 3 and again.ppo.lr == 0.002
    finally:
        METHODS.pop("pickle_toy", None)  # the other tests of this process see the built-in methods only
    code = ("import pickle, sys; c = pickle.loads(open(sys.argv[1], 'rb').read()); "
            "print(c.method, c.ppo.lr, hasattr(c, 'pickle_toy'))")
    out = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["grpo", "0.002", "False"]
