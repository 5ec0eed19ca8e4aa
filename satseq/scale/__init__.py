"""Scaling out on existing engines (docs/scale.md): Ray actors hosting agents (``trainer.backend=ray``:
ray_*.py, pipeline.py) and torch.distributed data parallel inside an agent (ddp*.py). ``ray`` is
never imported on the default local path."""
