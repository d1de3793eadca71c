"""Throughput and latency harness: orderflow beside its Python peers, same run, same Redis.

Not part of the test suite. Run ``uv run --group bench python -m benchmarks --help``.
"""
