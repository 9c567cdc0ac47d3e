"""``flask ratchet …``: a thin click group over library functions.

Each command parses its options and calls the same API a program would; no logic lives here.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING, Any

import click
from flask import current_app
from flask.cli import AppGroup

from . import migrate, runtime
from .api import queues, recurring
from .cli_jobs import cli_user, jobs_cli, signals_cli
from .cron import (
    DIALECT_FIELDS,
    DIALECT_LABELS,
    CronError,
    dialect,
    next_fire_times,
    validate,
    zone_info,
)
from .errors import InvalidJobId, InvalidOption, SchemaNotReady
from .worker_options import parse_metrics_address, parse_queues

if TYPE_CHECKING:
    from .worker.runner import Worker

#: The worker's logger: its signals are logged with its other lines.
log = logging.getLogger("flask_ratchet.worker")


class RatchetGroup(AppGroup):
    """``flask ratchet``: any of its commands run against tables that are missing or older than
    this version needs, or given a job id that is no UUID, ends with the one line that says so
    (exit code 1), not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (SchemaNotReady, InvalidJobId) as exc:
            raise click.ClickException(str(exc)) from None


ratchet_cli = RatchetGroup("ratchet", help="flask-ratchet: jobs, workers and schema.")
ratchet_cli.add_command(jobs_cli)
ratchet_cli.add_command(signals_cli)


@ratchet_cli.command("worker")
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1000),
    default=None,
    help="Job threads (default RATCHET_CONCURRENCY).",
)
@click.option(
    "--queues",
    default=None,
    callback=lambda ctx, param, value: _queues_option(value),
    help="The queues to take, each with an optional thread limit: 'mail=4,reports=1,default' "
    "(default RATCHET_QUEUES, else every queue).",
)
@click.option(
    "--prefetch",
    type=click.IntRange(0),
    default=None,
    help="Jobs held waiting for a thread beyond the free ones; 0: claim only for free threads "
    "(default RATCHET_PREFETCH, else adapted to the jobs' run time).",
)
@click.option("--node-id", default=None, help="This worker's id (default host:pid).")
@click.option("--burst", is_flag=True, help="Exit once nothing is due.")
@click.option(
    "--drain-timeout",
    type=click.FloatRange(0),
    default=None,
    help="Seconds running jobs get to finish on SIGTERM (default RATCHET_DRAIN_TIMEOUT).",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default=None,
    help="The least severe lines ratchet logs (default INFO; failures are WARNING and ERROR).",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object per line, for log shippers (when the app configured no logging).",
)
@click.option(
    "--metrics-port",
    default=None,
    callback=lambda ctx, param, value: _metrics_option(value),
    help="Serve Prometheus metrics on this port ('9100', or '127.0.0.1:9100'); needs "
    "flask-ratchet[prometheus] (default RATCHET_METRICS_PORT, else none).",
)
def worker(
    concurrency: int | None,
    queues: dict[str, int | None] | None,
    prefetch: int | None,
    node_id: str | None,
    burst: bool,
    drain_timeout: float | None,
    log_level: str | None,
    log_format: str,
    metrics_port: tuple[str, int] | None,
) -> None:
    """Run jobs until SIGTERM/SIGINT (then drain) or, with --burst, until nothing is due."""
    from .worker import logs
    from .worker.runner import Worker

    logs.configure(log_level and log_level.upper(), log_format)
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    try:
        built = Worker(
            app,
            concurrency=concurrency,
            node_id=node_id,
            burst=burst,
            drain_timeout=drain_timeout,
            queues=queues,
            prefetch=prefetch,
            metrics_port=metrics_port,
        )
        _stop_on_signals(built)
        # A worker runs no `flask db` command, and pushes an app context per job.
        migrate.unguard_host_migrations(app)
        # What is built by now (modules, the app, the worker's parts) lives as long as the
        # process: out of the collector's sight, each full collection while jobs run, and the
        # last one at exit, no longer walks it (a tenth of a second at every start and stop).
        gc.freeze()
        code = built.run()
    except SchemaNotReady as exc:
        raise click.ClickException(str(exc)) from None  # one line, exit code 1: no traceback
    sys.exit(code)


def _stop_on_signals(built: Worker) -> None:
    """The first SIGTERM or SIGINT drains the worker; a second exits at once (orphan recovery,
    or this node's own reclaim at its next start, picks its running jobs up)."""
    received = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal received
        received += 1
        if received > 1:
            log.warning("second signal: stopping at once; running jobs will be recovered")
            os._exit(1)
        log.info("signal %s: draining (a second signal stops at once)", signal.Signals(signum).name)
        built.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _metrics_option(value: str | None) -> tuple[str, int] | None:
    try:
        return None if value is None else parse_metrics_address(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _queues_option(value: str | None) -> dict[str, int | None] | None:
    try:
        return None if value is None else parse_queues(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@ratchet_cli.group("db")
def db_cli() -> None:
    """Create and upgrade ratchet's own tables (alembic, version table ratchet_alembic_version)."""


@db_cli.command("upgrade")
@click.argument("revision", default="head")
def db_upgrade(revision: str) -> None:
    """Upgrade ratchet's tables to REVISION (default: head)."""
    engine = runtime.current().engine
    migrate.upgrade(engine, revision)
    click.echo(f"ratchet schema at {migrate.current(engine)}")


@db_cli.command("downgrade")
@click.argument("revision")
def db_downgrade(revision: str) -> None:
    """Downgrade ratchet's tables to REVISION ('base' drops them)."""
    engine = runtime.current().engine
    migrate.downgrade(engine, revision)
    click.echo(f"ratchet schema at {migrate.current(engine) or 'base (no tables)'}")


@db_cli.command("current")
def db_current() -> None:
    """Show the revision ratchet's tables are at, and the newest one available."""
    engine = runtime.current().engine
    click.echo(f"current: {migrate.current(engine) or 'none (run: flask ratchet db upgrade)'}")
    click.echo(f"head:    {migrate.head()}")


@ratchet_cli.group("recurring")
def recurring_cli() -> None:
    """Look at and act on recurring jobs."""


@recurring_cli.command("list")
@click.option("--all", "include_canceled", is_flag=True, help="Include canceled masters.")
def recurring_list(include_canceled: bool) -> None:
    """List recurring jobs with their next fire times (UTC)."""
    masters = recurring.list_all(runtime.current(), include_canceled)
    if not masters:
        click.echo("no recurring jobs")
    for m in masters:
        upcoming = m.next_fire.isoformat(timespec="seconds") if m.next_fire else "-"
        click.echo(f"{m.id}  {m.status:<8}  next {upcoming}  {m.cron!r} {m.zone}  {m.task}")


@recurring_cli.command("register")
def recurring_register() -> None:
    """Register the app's declared recurring jobs now (workers do it when they start)."""
    for m in recurring.register_declared(runtime.current()):
        click.echo(f"{m.id}  {m.status}")


@recurring_cli.command("pause")
@click.argument("recurring_id")
def recurring_pause(recurring_id: str) -> None:
    """Stop creating children until resumed."""
    _report_recurring(recurring.pause(runtime.current(), recurring_id), recurring_id, "paused")


@recurring_cli.command("resume")
@click.argument("recurring_id")
def recurring_resume(recurring_id: str) -> None:
    """Fire again from the next occurrence."""
    _report_recurring(recurring.resume(runtime.current(), recurring_id), recurring_id, "resumed")


@recurring_cli.command("cancel")
@click.argument("recurring_id")
def recurring_cancel(recurring_id: str) -> None:
    """End a recurring job (its id is free to be registered again)."""
    _report_recurring(recurring.cancel(runtime.current(), recurring_id), recurring_id, "canceled")


@recurring_cli.command("run-now")
@click.argument("recurring_id")
def recurring_run_now(recurring_id: str) -> None:
    """Create one extra child now."""
    child = recurring.run_now(runtime.current(), recurring_id)
    _report_recurring(child is not None, recurring_id, "run")
    click.echo(f"job {child}")


@recurring_cli.command("preview")
@click.argument("cron")
@click.option("--zone", default="UTC", show_default=True, help="IANA time zone.")
@click.option("-n", "count", type=click.IntRange(1, 100), default=5, show_default=True)
def recurring_preview(cron: str, zone: str, count: int) -> None:
    """Show the dialect and the next fire times of a CRON expression (Unix, Quartz, or an
    interval such as '@every 5m')."""
    try:
        validate(cron, zone)
        times = next_fire_times(cron, zone, datetime.now(UTC), count)
    except CronError as exc:
        raise click.ClickException(str(exc)) from None
    spoken = dialect(cron)
    click.echo(f"{DIALECT_LABELS[spoken]}: {DIALECT_FIELDS[spoken]}")
    tz = zone_info(zone)
    for t in times:
        click.echo(f"{t.isoformat()}  ({t.astimezone(tz).isoformat()} {zone})")


@ratchet_cli.group("queues")
def queues_cli() -> None:
    """Look at, pause and resume named queues."""


@queues_cli.command("list")
def queues_list() -> None:
    """Every known queue, as the console's queues page lists them (the default queue, every
    queue ever paused, every queue a live or ended job names): its live jobs per status and
    its oldest due wait."""
    found = queues.queues(runtime.current())
    click.echo(
        f"{'QUEUE':<24} {'STATE':<7} {'PENDING':>8} {'DUE':>8} {'RUNNING':>8} "
        f"{'PAUSED':>7}  OLDEST DUE WAIT"
    )
    for q in found:
        wait = "-" if q.oldest_due_wait is None else f"{q.oldest_due_wait:.1f}s"
        click.echo(
            f"{q.name:<24} {'paused' if q.paused else 'active':<7} {q.pending:>8} {q.due:>8} "
            f"{q.running:>8} {q.paused_jobs:>7}  {wait}"
        )


@queues_cli.command("pause")
@click.argument("name")
def queues_pause(name: str) -> None:
    """Stop every worker claiming jobs of queue NAME (running jobs finish)."""
    changed = _queue_change(queues.pause_queue, name)
    click.echo(f"queue {name} paused" if changed else f"queue {name} was paused already")


@queues_cli.command("resume")
@click.argument("name")
def queues_resume(name: str) -> None:
    """Let workers claim jobs of queue NAME again."""
    changed = _queue_change(queues.resume_queue, name)
    click.echo(f"queue {name} resumed" if changed else f"queue {name} was not paused")


def _queue_change(change: Callable[..., bool], name: str) -> bool:
    try:
        return change(runtime.current(), name, by=f"cli:{cli_user()}")
    except InvalidOption as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None


def _report_recurring(done: bool, recurring_id: str, verb: str) -> None:
    if not done:
        raise click.ClickException(
            f"recurring job {recurring_id} was not {verb}: it does not exist or its status "
            "does not allow it (see 'flask ratchet recurring list --all')"
        )
    click.echo(f"recurring job {recurring_id} {verb}")
