"""The worker: claims due jobs, runs them, writes their outcomes (``runner.Worker``).

Nothing is imported here: the app side uses :mod:`.wakeup` without loading the worker.
"""
