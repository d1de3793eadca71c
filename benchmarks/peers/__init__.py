"""One adapter per library: its worker app, its producer and how to read its backlog.

Each ``*_app`` module is imported by that library's own worker CLI in a subprocess;
it reads the Redis URL from ``BENCH_REDIS_URL``.
"""
