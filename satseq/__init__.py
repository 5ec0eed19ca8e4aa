"""satseq: multi-agent, multi-turn RL post-training of LLMs on verifiable reasoning."""
__version__ = "0.1.0"
