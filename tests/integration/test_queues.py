"""Named queues on SQLite and PostgreSQL: where jobs go, what a claim takes, pausing, reads."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from flask import Flask

from flask_ratchet import InvalidOption, JobStatus, Priority, QueueSummary
from flask_ratchet.recurring import decode_options
from flask_ratchet.schema import job, job_queue
from flask_ratchet.store.types import ClaimedJob, Finished, Outcome, Refused
from tests.apps import add, db, ratchet, send_mail
from tests.integration.helpers import count


def queue_of(job_id: uuid.UUID) -> tuple[str, str]:
    """The queue a job's cold row and hot row hold."""
    with db.engine.connect() as conn:
        cold = conn.execute(sa.select(job.c.queue).where(job.c.job_id == job_id)).scalar_one()
        hot = conn.execute(
            sa.select(job_queue.c.queue).where(job_queue.c.job_id == job_id)
        ).scalar_one()
    return cold, hot


def submit(queue: str, priority: Priority = Priority.NORMAL, minutes_ago: float = 1) -> uuid.UUID:
    when = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    builder = ratchet.schedule_at(when, add, 1, 2).with_queue(queue).with_priority(priority)
    return builder.submit().id


# -- where jobs go -------------------------------------------------------------------------------


def test_a_job_goes_to_its_builders_queue_else_its_tasks_else_default(app: Flask) -> None:
    plain = ratchet.enqueue(add, 1, 2).submit().id
    by_task = ratchet.enqueue(send_mail, "a@example.com").submit().id
    chosen = ratchet.enqueue(send_mail, "b@example.com").with_queue("bulk-mail").submit().id
    assert queue_of(plain) == ("default", "default")
    assert queue_of(by_task) == ("mail", "mail")
    assert queue_of(chosen) == ("bulk-mail", "bulk-mail")
    found = ratchet.get_job(chosen)
    assert found is not None and found.queue == "bulk-mail"


def test_many_jobs_keep_their_queues_on_every_submission_path(app: Flask) -> None:
    # Several without keys take PostgreSQL's COPY; with keys, the statement; SQLite its Core.
    copied = ratchet.enqueue_many(
        ratchet.enqueue(add, i, 0).with_queue(f"q{i % 2}") for i in range(4)
    )
    keyed = ratchet.enqueue_many(
        ratchet.enqueue(add, i, 0).with_queue("keyed").with_idempotency_key(f"k{i}")
        for i in range(3)
    )
    assert [queue_of(h.id)[1] for h in copied] == ["q0", "q1", "q0", "q1"]
    assert {queue_of(h.id) for h in keyed} == {("keyed", "keyed")}


@pytest.mark.parametrize(
    "name", ["", "a b", "mail,reports", "mail=4", "x" * 65, "é", "a\x00", None, 7]
)
def test_a_bad_queue_name_is_refused_before_anything_is_written(app: Flask, name: object) -> None:
    with pytest.raises(InvalidOption, match="queue must be 1 to 64 letters"):
        ratchet.enqueue(add, 1, 2).with_queue(name).submit()  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="queue must be"):
        ratchet.pause_queue(name)  # type: ignore[arg-type]
    assert count("ratchet_job") == 0 and count("ratchet_queue") == 0


def test_batch_children_take_the_batchs_queue(app: Flask) -> None:
    handle = (
        ratchet.enqueue_batch("nightly")
        .add(add, 1, 1)
        .add(send_mail, "x")
        .with_queue("batch")
        .submit()
    )
    children = ratchet.find_jobs(queue="batch").items
    assert len(children) == 3  # the two children, and the parent
    assert handle.id in {j.id for j in children}


def test_a_chains_queue_leaves_a_step_that_chose_its_own(app: Flask) -> None:
    own = ratchet.enqueue(add, 3, 3).with_queue("mine")
    flow = ratchet.enqueue(add, 1, 1).then(add, 2, 2).then(own).with_queue("chain").submit()
    queues = [queue_of(i)[0] for i in flow.ids]
    assert queues == ["chain", "chain", "mine"]


def test_a_recurring_masters_children_take_its_queue(app: Flask) -> None:
    ratchet.schedule_recurring("0 0 12 1 * ?", "UTC", add, 1, 1).with_queue(
        "cron"
    ).with_business_key("q.monthly").submit()
    child = ratchet.run_recurring_now("q.monthly")
    assert child is not None and queue_of(child.id) == ("cron", "cron")


def test_options_stored_before_queues_existed_read_as_the_default_queue() -> None:
    old = (
        '{"backoff":"EXPONENTIAL","backoff_base":10.0,"max_retries":3,"params":{},'
        '"priority":2,"resource":null,"tags":[],"timeout":null}'
    )
    assert decode_options(old).queue == "default"


def test_find_jobs_and_queue_health_by_queue(app: Flask) -> None:
    submit("mail")
    submit("mail")
    submit("reports")
    assert len(ratchet.find_jobs(queue="mail").items) == 2
    assert ratchet.find_jobs(queue="nothing-here").items == []
    health = ratchet.queue_health("mail")
    assert health["counts"]["PENDING"] == 2 and health["due"] == 2
    assert health["oldest_pending_age"] >= 50
    assert ratchet.queue_health()["counts"]["PENDING"] == 3


# -- what a claim takes ----------------------------------------------------------------------------


def test_a_claim_naming_queues_takes_only_their_jobs(app: Flask) -> None:
    mail = {submit("mail") for _ in range(3)}
    submit("reports")
    claimed = ratchet.claim_due(10, "n", queues=["mail", "absent"])
    assert {c.job_id for c in claimed} == mail
    assert {c.queue for c in claimed} == {"mail"}
    assert [c.queue for c in ratchet.claim_due(10, "n")] == ["reports"]


def test_quotas_cap_each_queue_and_priority_orders_across_them(app: Flask) -> None:
    slow = [submit("slow", Priority.CRITICAL, minutes_ago=m) for m in (3, 2, 1)]
    fast_high = submit("fast", Priority.HIGH)
    fast_low = submit("fast", Priority.LOW)
    claimed = ratchet.claim_due(10, "n", queues={"slow": 1, "fast": 10})
    assert [c.job_id for c in claimed] == [slow[0], fast_high, fast_low]


def test_a_paused_queue_is_claimed_by_no_one_until_resumed(app: Flask) -> None:
    paused = {submit("mail") for _ in range(2)}
    other = submit("default")
    assert ratchet.pause_queue("mail") is True
    assert ratchet.pause_queue("mail") is False  # already paused: nothing changes
    assert [c.job_id for c in ratchet.claim_due(10, "n")] == [other]
    assert ratchet.claim_due(10, "n", queues=["mail"]) == []
    for job_id in paused:
        found = ratchet.get_job(job_id)
        assert found is not None and found.status == JobStatus.PENDING
    assert ratchet.resume_queue("mail") is True
    assert ratchet.resume_queue("mail") is False
    assert {c.job_id for c in ratchet.claim_due(10, "n", queues=["mail"])} == paused


def test_the_next_due_time_leaves_paused_queues_out(app: Flask) -> None:
    submit("mail", minutes_ago=5)
    later = ratchet.schedule(timedelta(hours=1), add, 1, 1).with_queue("reports").submit()
    ratchet.pause_queue("mail")
    store = ratchet.runtime.store
    with db.engine.connect() as conn:
        assert store.queues.live(conn) == ["mail", "reports"]
        every = store.queues.claimable(conn, None)
        assert every == ["reports"]
        due, now = store.cluster.next_due_and_now(conn, every)
        assert due is not None and due > now + timedelta(minutes=59)
        assert (
            store.cluster.next_due_and_now(conn, store.queues.claimable(conn, ["mail"]))[0] is None
        )
    found = ratchet.get_job(later.id)
    assert found is not None and found.queue == "reports"


def test_queues_summarise_live_jobs_and_paused_state(app: Flask) -> None:
    submit("mail", minutes_ago=2)
    submit("mail")
    ratchet.schedule(timedelta(hours=1), add, 1, 1).with_queue("mail").submit()
    ratchet.claim_due(1, "n", queues=["mail"])
    ratchet.pause_queue("idle")
    found = {q.name: q for q in ratchet.queues()}
    assert set(found) == {"default", "idle", "mail"}  # every known queue, as the console
    mail = found["mail"]
    assert (mail.paused, mail.pending, mail.due, mail.running) == (False, 2, 1, 1)
    assert mail.oldest_due_wait is not None and 50 <= mail.oldest_due_wait < 120
    assert found["idle"] == QueueSummary(name="idle", paused=True)


# -- refusals: a worker hands back a job whose task it does not know ----------------------------


def refuse(claimed: ClaimedJob, node: str, grace: float = 600.0) -> Refused:
    store = ratchet.runtime.store
    with store.begin(db.engine) as conn:
        return store.executions.refuse(conn, node, claimed, f"{node} does not know it", grace)


def refusal_columns(job_id: uuid.UUID) -> tuple[datetime | None, str | None]:
    with db.engine.connect() as conn:
        row = conn.execute(
            sa.select(job_queue.c.refused_since, job_queue.c.refused_by).where(
                job_queue.c.job_id == job_id
            )
        ).one()
    return row.refused_since, row.refused_by


def set_refusal(job_id: uuid.UUID, since: datetime | None, by: str | None) -> None:
    with db.engine.begin() as conn:
        conn.execute(
            sa.update(job_queue)
            .where(job_queue.c.job_id == job_id)
            .values(refused_since=since, refused_by=by)
        )


def test_a_refused_job_is_handed_back_unspent_saying_who_refused_it(app: Flask) -> None:
    job_id = ratchet.enqueue(add, 1, 1).submit().id
    (claimed,) = ratchet.claim_due(1, "node-a")
    assert refuse(claimed, "node-a") == Refused(handed_back=True)
    found = ratchet.get_job(job_id)
    assert found is not None and (found.status, found.attempts) == (JobStatus.PENDING, 0)
    since, by = refusal_columns(job_id)
    assert since is not None and by == '[["node-a","node-a does not know it"]]'
    (again,) = ratchet.claim_due(1, "node-b")
    assert refuse(again, "node-b") == Refused(handed_back=True)
    assert refusal_columns(job_id) == (
        since,  # the grace counts from the first refusal
        '[["node-a","node-a does not know it"],["node-b","node-b does not know it"]]',
    )
    # A job another node holds is not this one's to hand back: nothing changes.
    (held,) = ratchet.claim_due(1, "node-c")
    assert refuse(held, "node-x") == Refused(handed_back=False)
    found = ratchet.get_job(job_id)
    assert found is not None and (found.status, found.picked_by) == (JobStatus.RUNNING, "node-c")


def test_after_the_grace_a_refusal_carries_the_dead_letter_reason_and_writes_nothing(
    app: Flask,
) -> None:
    job_id = ratchet.enqueue(add, 1, 1).submit().id
    (claimed,) = ratchet.claim_due(1, "node-a")
    refuse(claimed, "node-a")
    long_ago = datetime.now(UTC) - timedelta(minutes=11)
    set_refusal(job_id, long_ago, refusal_columns(job_id)[1])
    (again,) = ratchet.claim_due(1, "node-b")
    refused = refuse(again, "node-b")
    assert not refused.handed_back and refused.dead_letter is not None
    assert refused.dead_letter.startswith("no worker ran task 'tests.apps:add' within 600s")
    assert "node-a: node-a does not know it; node-b: node-b does not know it" in refused.dead_letter
    found = ratchet.get_job(job_id)
    assert found is not None and (found.status, found.picked_by) == (JobStatus.RUNNING, "node-b")


@pytest.mark.parametrize(
    "since, by",
    [
        (datetime(9000, 1, 1, tzinfo=UTC), "not json"),
        (None, '[["a", {"b": 1}], "x", 3]'),
        (None, "[" * 50_000),
    ],
    ids=["future-garbage", "malformed-list", "deep-nesting"],
)
def test_refusal_columns_ratchet_never_wrote_neither_stall_nor_crash(
    app: Flask, since: datetime | None, by: str
) -> None:
    job_id = ratchet.enqueue(add, 1, 1).submit().id
    set_refusal(job_id, since, by)
    (claimed,) = ratchet.claim_due(1, "node-a")
    assert refuse(claimed, "node-a") == Refused(handed_back=True)
    first, written = refusal_columns(job_id)
    assert first is not None and first <= datetime.now(UTC) + timedelta(seconds=5)
    assert written == '[["node-a","node-a does not know it"]]'


def test_a_run_by_a_worker_that_knows_the_task_clears_the_refusals(app: Flask) -> None:
    job_id = ratchet.enqueue(add, 1, 1).submit().id
    (claimed,) = ratchet.claim_due(1, "node-a")
    refuse(claimed, "node-a")
    (ran,) = ratchet.claim_due(1, "node-b")
    store = ratchet.runtime.store
    retry = Finished(job_id, Outcome.RETRY, ran.task, ran.attempt, error="boom", delay=60)
    with store.begin(db.engine) as conn:
        assert store.executions.complete_many(conn, "node-b", [retry]) == {job_id}
    assert refusal_columns(job_id) == (None, None)


def test_a_claim_leaves_out_the_tasks_its_worker_refused(app: Flask) -> None:
    plain = ratchet.enqueue(add, 1, 1).submit().id
    mail = ratchet.enqueue(send_mail, "x").submit().id
    store = ratchet.runtime.store
    with store.single_statement(ratchet.runtime.engine) as conn:
        claimed = store.jobs.claim_due(conn, 10, "n", 15, None, ["tests.apps:add"])
    assert [c.job_id for c in claimed] == [mail]
    with store.single_statement(ratchet.runtime.engine) as conn:
        claimed = store.jobs.claim_due(conn, 10, "n", 15, {"default": 5}, ["tests.apps:add"])
    assert claimed == []
    assert [c.job_id for c in ratchet.claim_due(10, "n")] == [plain]
