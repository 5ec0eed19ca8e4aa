"""Models: loading (HF dirs, hub ids, GGUF), the embedded tiny model, agent wrappers."""
