"""The worker: claims due jobs, runs them, writes their outcomes (``runner.Worker``).

Nothing is imported here: a module of the worker loads only what it needs.
"""
