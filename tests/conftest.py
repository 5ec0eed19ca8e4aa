import os

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# torch threads per test process: SATSEQ_TEST_THREADS, else the cores shared out among the xdist workers
# (make test runs 2 workers on 2 cores: one thread each, so that they do not fight over the cores)
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(int(os.environ.get("SATSEQ_TEST_THREADS", max(1, min(2, (os.cpu_count() or 2) // _WORKERS)))))


class ScriptedEngine:
    """A rollout engine that replays fixed text: ``script(role_prompt_text) -> response text``."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.calls = []

    def generate(self, model, prompts, sampling, generator=None):
        from satseq.rollout.types import Generation

        out = []
        for p in prompts:
            text = self.tokenizer.decode(p, skip_special_tokens=True)
            self.calls.append(text)
            resp = self.script(text)
            ids = self.tokenizer(resp, add_special_tokens=False)["input_ids"]
            out.append(Generation(prompt_ids=list(p), response_ids=ids, logprobs=[-0.1] * len(ids), text=resp,
                                  finish_reason="eos"))
        return out


@pytest.fixture(scope="session")
def tiny():
    from satseq.models.tiny import build_tiny_model

    return build_tiny_model(seed=0)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A randomly initialised tiny model saved as an ordinary HF model directory."""
    from satseq.models.tiny import build_tiny_model, save_model_dir

    d = tmp_path_factory.mktemp("tiny") / "model"
    model, tok = build_tiny_model(seed=1)
    save_model_dir(model, tok, d)
    return d


# make test runs 2 xdist workers with --dist loadgroup: each test goes to whichever worker is free, except
# those of a module with an expensive module-scoped fixture (one trained run several tests read), which stay
# together on one worker so that the fixture is built once; both Ray modules share one group, so that two
# local Ray clusters never start at once
SHARED_FIXTURE_MODULES = {"test_compare", "test_compare_sweep", "test_eval_runner", "test_fsdp", "test_grading_timeout",
                          "test_model_loading", "test_multiturn_e2e", "test_tutorials", "test_vllm_engine",
                          "test_vs_trl_bench"}
RAY_MODULES = {"test_ray_backend", "test_ray_multinode"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.module.__name__.rsplit(".", 1)[-1]
        group = "ray" if name in RAY_MODULES else name if name in SHARED_FIXTURE_MODULES else None
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
