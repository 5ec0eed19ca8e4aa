"""LoRA agents start in eval mode: dropout is on only while the trainer fits (``training_mode``).

peft creates each new adapter's ``lora_dropout`` in train mode; left so, a run's first π_cur forward
and KL check ran with dropout, and a resumed LoRA run with dropout > 0 did not continue exactly.
"""
from satseq.models.agents import AgentPool
from satseq.models.tiny import build_tiny_model


def test_lora_pool_modules_start_in_eval_mode():
    model, tok = build_tiny_model(seed=0)  # its own copy: peft injects the adapters into the model
    pool = AgentPool.lora(["a", "b"], model, tok, r=4, alpha=8, dropout=0.1, target_modules=("q_proj", "v_proj"))
    modules = list(pool.module("b").modules())
    assert any(type(m).__name__ == "Dropout" and m.p == 0.1 for m in modules)
    assert not any(m.training for m in modules)
