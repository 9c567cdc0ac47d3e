"""The maintenance tasks themselves: orphan recovery and retention."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.engine import Engine

from .. import facts
from ..config import RatchetConfig
from ..store import Store
from ..store.signals import TIMEOUT_BATCH
from .periodic import PeriodicTask

log = logging.getLogger("flask_ratchet.worker")

DAY = 86400.0
#: Rows archived per transaction, so retention never holds long locks.
ARCHIVE_BATCH = 1000


def orphan_recovery(
    config: RatchetConfig,
    on_events: Callable[[list[facts.Event]], None] = lambda _: None,
    on_recovered: Callable[[list[str]], None] = lambda _: None,
) -> PeriodicTask:
    """Requeue (or fail) RUNNING jobs of silent nodes; forget nodes silent for long; settle
    batches left unsettled. ``on_events`` gets the events of what it changed, once committed;
    ``on_recovered`` the task of each job it took back."""

    def run(store: Store, engine: Engine) -> None:
        with store.begin(engine) as conn:
            recovered = store.cluster.recover_orphans(conn, config.orphan_grace)
            store.cluster.delete_dead_nodes(conn, max(10 * config.orphan_grace, 3600.0))
            settled = store.flows.settle_stranded_batches(conn)
            recorded = facts.take(conn)
        if recorded:
            on_events(recorded)
        taken = [*recovered.requeued, *recovered.failed]
        if taken:
            on_recovered([recovered.tasks.get(job_id, "?") for job_id in taken])
        if settled:
            log.warning("settled %d batches whose last child had ended unseen", settled)
        for job_id in recovered.requeued:
            log.warning(
                "job %s (%s) taken back and due again: %s",
                job_id,
                recovered.tasks.get(job_id, "?"),
                recovered.reason,
            )
        for job_id in recovered.failed:
            log.error(
                "job %s (%s) taken back, failed for good on its last attempt (dead-letter "
                "queue): %s",
                job_id,
                recovered.tasks.get(job_id, "?"),
                recovered.reason,
            )

    interval = max(1.0, min(config.orphan_grace / 2, config.maintenance_interval))
    return PeriodicTask("orphan-recovery", interval, run)


def signal_timeouts(
    config: RatchetConfig, on_events: Callable[[list[facts.Event]], None] = lambda _: None
) -> PeriodicTask:
    """End the waits of WAITING jobs whose signal did not come in time: each a failed attempt
    (waiting again while retries remain, else FAILED and dead-lettered), a batch of the
    oldest deadlines at a time on the WAITING index (its cost does not grow with the others)."""

    def run(store: Store, engine: Engine) -> None:
        while True:
            with store.begin(engine) as conn:
                done = store.jobs.signals.time_out(conn, store.now(conn))
                recorded = facts.take(conn)
            if recorded:
                on_events(recorded)
            for job_id in done.failed:
                log.error("job %s failed for good: its signal did not come in time", job_id)
            if len(done.waiting_again) + len(done.failed) < TIMEOUT_BATCH:
                return

    interval = max(1.0, min(config.maintenance_interval, config.poll_max_interval))
    return PeriodicTask("signal-timeouts", interval, run)


def retention(config: RatchetConfig) -> PeriodicTask:
    """Archive jobs that ended over RATCHET_RETENTION_DAYS ago; purge old alerts and logs."""

    def run(store: Store, engine: Engine) -> None:
        moved = 0
        while True:
            with store.begin(engine) as conn:
                n = store.cluster.archive_ended(conn, config.retention_days * DAY, ARCHIVE_BATCH)
            moved += n
            if n < ARCHIVE_BATCH:
                break
        with store.begin(engine) as conn:
            alerts = store.cluster.purge_alerts(conn, config.dlq_retention_days * DAY)
            logs = store.cluster.purge_logs(conn, config.log_retention_days * DAY)
        if moved or alerts or logs:
            log.info(
                "retention: archived %d jobs, purged %d alerts, %d log lines", moved, alerts, logs
            )

    return PeriodicTask("retention", config.retention_interval, run)
