import os

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# every test that loads a GGUF file exercises transformers' GGUF path; tests/test_gguf_cache.py turns the
# converted-model cache on in a temporary directory
os.environ.setdefault("SATSEQ_GGUF_CACHE", "0")
# rollout.engine / rollout.dtype = auto without a measurement (hf in the model's dtype), so the suite runs the
# same on every CPU; tests/test_rollout_choice.py turns the calibration on
os.environ.setdefault("SATSEQ_ROLLOUT_CALIBRATION", "off")
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



class ScriptedPool:
    """The agent pool a :class:`ScriptedEngine` rolls out against: a tokenizer, and a module without a
    context length (the scripted engine runs no model, so only the episode's turns bound it)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def module(self, name):
        return object()

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

