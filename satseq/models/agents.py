"""Agents (roles) and their policies: K full models, or K LoRA adapters on one shared base.

* ``full`` — each agent owns a full copy of its model (the default for the embedded tiny model,
  where three copies cost nothing and full fine-tuning learns fastest). The reference policy is a
  frozen copy of the starting weights, made only when something asks for it.
* ``lora`` — one base model, one peft LoRA adapter per agent (the default for HF models: K
  adapters cost far less memory than K copies). The reference policy is the base with adapters
  disabled — no second copy in memory.

Everything a trainer needs goes through this class: the module that acts for an agent, the
agent's trainable parameters, snapshots of them (for the KL check's backtracking and for exact
resume), and saving one loadable HF-format checkpoint per agent.
"""
from __future__ import annotations

import contextlib
import copy
import shutil
from pathlib import Path

import torch

from satseq.errors import ConfigError
from satseq.utils.io import atomic_dir


class AgentPool:
    def __init__(self, names: list[str], tokenizer, *, mode: str, models: dict | None = None,
                 peft_model=None, device: str = "cpu"):
        if len(set(names)) != len(names):
            raise ConfigError(f"agent names must be unique, got {names}")
        self.names = list(names)
        self.tokenizer = tokenizer
        self.mode = mode
        self.device = device
        self._models = models or {}
        self._peft = peft_model
        self._references: dict[str, torch.nn.Module] = {}
        self.module_copier = copy.deepcopy  # a frozen copy for keep_reference (sharded models: satseq.scale.fsdp)
        self.optimizers: dict[str, list] = {}  # per agent, the optimizers made for it (sharded checkpoints)
        if mode == "lora":
            for n, p in self._peft.named_parameters():
                p.requires_grad_("lora_" in n and any(f".{a}." in n for a in self.names))

    # ----------------------------------------------------------------- construction
    @classmethod
    def full(cls, names: list[str], models: list[torch.nn.Module], tokenizer, device="cpu") -> "AgentPool":
        from satseq.models.quantize import refuse_full

        refuse_full(models)  # a bitsandbytes model (model.quantization) trains LoRA adapters only
        return cls(names, tokenizer, mode="full", models=dict(zip(names, models)), device=device)

    @classmethod
    def lora(cls, names: list[str], base: torch.nn.Module, tokenizer, *, r=16, alpha=32, dropout=0.05,
             target_modules=("q_proj", "k_proj", "v_proj", "o_proj"), adapter_paths: dict | None = None,
             device="cpu") -> "AgentPool":
        from peft import LoraConfig, get_peft_model

        from satseq.models.quantize import prepare_for_lora

        prepare_for_lora(base)  # a bitsandbytes base (model.quantization): frozen, QLoRA-style; else nothing
        cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(target_modules),
                         task_type="CAUSAL_LM")
        peft_model = get_peft_model(base, cfg, adapter_name=names[0])
        for name in names[1:]:
            peft_model.add_adapter(name, cfg)
        for name, path in (adapter_paths or {}).items():
            if path:
                peft_model.load_adapter(path, adapter_name=name, is_trainable=True)
        peft_model.eval()  # new adapters' lora_dropout modules start in train mode; the trainer turns it on to fit
        return cls(names, tokenizer, mode="lora", peft_model=peft_model, device=device)

    def only(self, names: list[str]) -> "AgentPool":
        """This pool restricted to ``names`` (a Ray actor hosting some of the agents, docs/scale.md).
        LoRA: the other adapters are deleted from the shared base; the kept ones are untouched."""
        for n in names:
            self._check(n)
        if self.mode == "full":
            return AgentPool.full(list(names), [self._models[n] for n in names], self.tokenizer, device=self.device)
        self._peft.set_adapter(names[0])
        for n in self.names:
            if n not in names:
                self._peft.delete_adapter(n)
        return AgentPool(list(names), self.tokenizer, mode="lora", peft_model=self._peft, device=self.device)

    # ----------------------------------------------------------------- acting and training
    def module(self, name: str) -> torch.nn.Module:
        """The module that computes agent ``name``'s policy (activates its adapter in LoRA mode)."""
        self._check(name)
        if self.mode == "full":
            return self._models[name]
        self._peft.set_adapter(name)
        for n, p in self._peft.named_parameters():  # set_adapter may freeze the others; keep all trainable
            if "lora_" in n and any(f".{a}." in n for a in self.names):
                p.requires_grad_(True)
        return self._peft

    def root_modules(self) -> list[torch.nn.Module]:
        """The distinct models this pool holds: the K full models, or the one peft model (LoRA)."""
        return list(self._models.values()) if self.mode == "full" else [self._peft]

    def named_trainable(self, name: str) -> dict[str, torch.nn.Parameter]:
        self._check(name)
        if self.mode == "full":
            return {n: p for n, p in self._models[name].named_parameters()}
        return {n: p for n, p in self._peft.named_parameters() if "lora_" in n and f".{name}." in n}

    def parameters(self, name: str) -> list[torch.nn.Parameter]:
        return list(self.named_trainable(name).values())

    def trainable_state(self, name: str) -> dict[str, torch.Tensor]:
        """A detached copy of the agent's trainable weights (snapshot / resume)."""
        return {n: p.detach().clone() for n, p in self.named_trainable(name).items()}

    @torch.no_grad()
    def load_trainable_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        params = self.named_trainable(name)
        missing = set(params) - set(state)
        if missing:
            raise ConfigError(f"checkpoint for agent '{name}' lacks {len(missing)} tensors (e.g. {sorted(missing)[0]})")
        for n, p in params.items():
            p.copy_(state[n].to(p.device, p.dtype))

    @contextlib.contextmanager
    def reference(self, name: str | None = None):
        """The frozen reference policy of agent ``name`` (default: the first agent): adapters
        disabled (LoRA) or the copy of its start weights kept by :meth:`keep_reference`."""
        if self.mode == "lora":
            with self._peft.disable_adapter():
                yield self._peft
            return
        name = name or self.names[0]
        if name not in self._references:
            raise RuntimeError(f"reference policy of '{name}' requested but not kept; call keep_reference() first")
        yield self._references[name]

    def keep_reference(self, name: str | None = None) -> None:
        """Keep a frozen copy of agent ``name``'s current weights (default: the first agent) as its
        reference (full mode; no-op for LoRA, whose reference is the base with adapters disabled)."""
        name = name or self.names[0]
        self._check(name)
        if self.mode == "full" and name not in self._references:
            ref = self.module_copier(self._models[name]).eval()
            for p in ref.parameters():
                p.requires_grad_(False)
            self._references[name] = ref

    def enable_gradient_checkpointing(self) -> None:
        """Recompute each decoder layer's activations in backward instead of keeping them
        (``trainer.gradient_checkpointing``; transformers' own, non-reentrant, active in training mode
        only): activation memory of a grad pass drops from every layer's to one layer's plus the
        layer inputs, for about one extra forward of compute."""
        models = list(self._models.values()) if self.mode == "full" else [self._peft.get_base_model()]
        for m in models:
            if not getattr(m, "supports_gradient_checkpointing", False):
                raise ConfigError(f"trainer.gradient_checkpointing: {type(m).__name__} does not support it")
            if hasattr(m, "activation_checkpointing_enable"):  # transformers >= 5.23's name
                m.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    # ----------------------------------------------------------------- saving
    def save_agent(self, name: str, out_dir: str | Path) -> Path:
        """One loadable HF-format checkpoint (full model or PEFT adapter, safetensors), atomically."""
        out_dir = Path(out_dir)
        with atomic_dir(out_dir) as tmp:
            if self.mode == "full":
                self._models[name].save_pretrained(tmp, safe_serialization=True)
            else:
                self._peft.save_pretrained(tmp, selected_adapters=[name], safe_serialization=True)
                sub = tmp / name  # peft writes non-default adapters into a subfolder
                if sub.is_dir():
                    for f in sub.iterdir():
                        shutil.move(str(f), tmp / f.name)
                    sub.rmdir()
            self.tokenizer.save_pretrained(tmp)
        return out_dir

    def _check(self, name: str) -> None:
        if name not in self.names:
            raise ConfigError(f"unknown agent '{name}' (agents: {', '.join(self.names)})")
