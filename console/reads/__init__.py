"""The console's read side, by screen: what each page shows, read in SQLAlchemy Core for both
databases, and bounded so that a page costs the same with a thousand jobs or a million.

=====================  =====================================================================
:mod:`.overview`       jobs per status (capped, estimated past the cap), throughput, actions
:mod:`.alarms`         the alarms in every page's header: index probes and capped counts
:mod:`.jobs`           the job list: filters, keyset pages, capped counts, bulk selections
:mod:`.job_search`     the job list's short-id and error-text search, FAILED by failure time
:mod:`.job_detail`     one job's page: executions, logs, alerts, neighbours, history
:mod:`.batches`        batches, their children, and the flow a job is part of
:mod:`.workflows`      workflow roots with their steps counted, and a root's timeline
:mod:`.dead_letters`   jobs that failed for good, grouped by task and fingerprint
:mod:`.resources`      resource limits, permits, waiting jobs, circuit breakers
:mod:`.queues`         every queue's figures; :mod:`.queue_runs` its waits and run times
:mod:`.nodes`          worker nodes, their queues and running jobs, the last ones stopped
:mod:`.audit`          the audit page: every console action, in keyset pages
:mod:`.substates`      PENDING and RUNNING jobs by sub-state: the list's filter, started jobs
=====================  =====================================================================

Queue health is the library's (``store.health``); recurring masters are read through
:mod:`flask_ratchet.api.recurring`. Nothing here writes: the console's actions go through the
library's operations (:mod:`flask_ratchet.api`). The pages use these modules by their names
(``reads.jobs``, ``reads.batches``, …).
"""

from . import (
    alarms,
    audit,
    batches,
    cluster,
    dead_letters,
    job_detail,
    job_why,
    jobs,
    nodes,
    overview,
    queues,
    resources,
    substates,
    workflows,
)

__all__ = [
    "alarms",
    "audit",
    "batches",
    "cluster",
    "dead_letters",
    "job_detail",
    "job_why",
    "jobs",
    "nodes",
    "overview",
    "queues",
    "resources",
    "substates",
    "workflows",
]
