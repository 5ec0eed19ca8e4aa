"""Datasets: benchmark names, local JSONL/JSON/parquet files and hub datasets -> ``Problem`` lists."""
from satseq.data.loading import BENCHMARKS, load_problems

__all__ = ["BENCHMARKS", "load_problems"]
