"""What the :class:`~flask_ratchet.Ratchet` object's methods do, one module per noun: submitting
jobs (:mod:`.submit`), chains and workflows (:mod:`.chains`), batches (:mod:`.batches`),
operations on jobs that exist (:mod:`.jobs`), recurring masters (:mod:`.recurring`),
resource limits (:mod:`.resources`), and who may see and change which job (:mod:`.policy`).

Each takes the app's :class:`~flask_ratchet.runtime.Runtime` and none imports ``Ratchet``: the
console and the CLI call them too. No SQL lives here (that is :mod:`flask_ratchet.store`).
"""

from . import (
    batches,
    chains,
    handles,
    jobs,
    policy,
    queues,
    recurring,
    resources,
    submit,
    tasks,
)

__all__ = [
    "batches",
    "chains",
    "handles",
    "jobs",
    "policy",
    "queues",
    "recurring",
    "resources",
    "submit",
    "tasks",
]
