"""``flask ratchet jobs …``: list, show and read one job's logs; cancel, retry or delete one
job by id, or every job matching filters (the library's bulk operations, with ``--dry-run``).
``flask ratchet signals deliver|reject``: the signals WAITING jobs await."""

from __future__ import annotations

import getpass
import json
import uuid
from collections.abc import Callable
from datetime import UTC
from typing import Any

import click

from . import runtime
from .api import bulk, jobs, signals
from .errors import InvalidJobId, InvalidOption
from .ids import job_id_of
from .payload import Unreadable
from .redact import masked, masked_arguments, stored_text_masked
from .runtime import Runtime
from .states import JobStatus
from .store.types import JobFilter


@click.group("jobs")
def jobs_cli() -> None:
    """Look at and act on jobs."""


@jobs_cli.command("list")
@click.option(
    "--status", type=click.Choice([s.value for s in JobStatus], case_sensitive=False), default=None
)
@click.option("--task", default=None, help="Only jobs of this task name.")
@click.option("--tag", default=None, help="Only jobs with this tag.")
@click.option("--queue", default=None, help="Only jobs of this queue.")
@click.option("--principal", default=None, help="Only jobs this principal submitted.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
def jobs_list(
    status: str | None,
    task: str | None,
    tag: str | None,
    queue: str | None,
    principal: str | None,
    limit: int,
) -> None:
    """List jobs, newest first."""
    try:
        page = jobs.find(
            runtime.current(),
            status=status.upper() if status else None,
            task=task,
            tag=tag,
            queue=queue,
            principal=principal,
            limit=limit,
        )
    except InvalidOption as exc:
        raise click.BadParameter(str(exc), param_hint="--queue") from None
    for job in page.items:
        click.echo(
            f"{job.id}  {job.status:<9}  {job.attempts}/{_tries(job.max_retries)}  "
            f"{job.queue:<12}  {job.task}"
        )
    if page.next_cursor:
        click.echo(f"(more: newest older than {page.next_cursor})")


def _tries(max_retries: object) -> str:
    """How many attempts a job may make; SQLite keeps any text a hand wrote in an integer
    column, which is printed as it is."""
    if isinstance(max_retries, int):
        return str(max_retries + 1)
    return f"{max_retries}+1"


@jobs_cli.command("show")
@click.argument("job_id")
@click.option(
    "--reveal-secrets",
    is_flag=True,
    help="Print arguments, params, result and error in clear (default: masked as the console "
    "masks them, so that secrets stay out of terminal scrollback and CI logs).",
)
def jobs_show(job_id: str, reveal_secrets: bool) -> None:
    """Show one job as JSON."""
    job = jobs.get(runtime.current(), job_id)
    if job is None:
        raise click.ClickException(f"no job has id {job_id}")
    fields = {name: getattr(job, name) for name in job.__dataclass_fields__}
    if not reveal_secrets:
        fields = _secrets_masked(fields, runtime.current().registry.parameter_names(job.task))
    click.echo(json.dumps(fields, indent=2, default=str))


def _secrets_masked(fields: dict[str, Any], arg_names: tuple[str, ...]) -> dict[str, Any]:
    """A job's fields with the values under secret-looking keys and URL passwords masked in
    what the job was given and gave back (a positional argument also by the name of its
    parameter, ``arg_names``), and secrets masked in its error."""
    shown = dict(fields)
    for name in ("args", "kwargs", "params", "result"):
        value = shown[name]
        # The raw text of a column that cannot be decoded may hold secrets all the same.
        if isinstance(value, Unreadable):
            shown[name] = stored_text_masked(value.text)
        elif name == "args":
            shown[name] = masked_arguments(value, arg_names)
        else:
            shown[name] = masked(value)
    if shown["error"] is not None:
        shown["error"] = stored_text_masked(shown["error"])
    return shown


@jobs_cli.command("logs")
@click.argument("job_id")
@click.option("--limit", type=click.IntRange(1, 10_000), default=500, show_default=True)
def jobs_logs(job_id: str, limit: int) -> None:
    """Show a job's log lines, oldest first, with URL passwords and secret values masked."""
    try:
        key = job_id_of(job_id)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    for line in jobs.logs(runtime.current(), key, limit):
        message = stored_text_masked(line.message)
        click.echo(f"{line.logged_at:%Y-%m-%d %H:%M:%S} #{line.attempt} {line.level:<7} {message}")


#: The options every bulk command takes: the filters of ``find_jobs`` and more.
_FILTERS = [
    click.option(
        "--status",
        "statuses",
        multiple=True,
        type=click.Choice([s.value for s in JobStatus], case_sensitive=False),
        help="Only jobs in this status (repeat for several).",
    ),
    click.option("--task", default=None, help="Only jobs of this task name."),
    click.option("--tag", default=None, help="Only jobs with this tag."),
    click.option("--queue", default=None, help="Only jobs of this queue."),
    click.option("--business-key", default=None, help="Only the job with this business key."),
    click.option("--batch", default=None, help="Only the children of this batch (its id)."),
    click.option("--principal", default=None, help="Only jobs this principal submitted."),
    click.option(
        "--fingerprint",
        default=None,
        help="Only the FAILED jobs of this dead-letter group (its fingerprint, as the console "
        "shows it; with --task).",
    ),
    *(
        click.option(
            f"--{name.replace('_', '-')}",
            name,
            type=click.DateTime(),
            default=None,
            help=f"Only jobs {name.replace('_', ' ')} this time (UTC).",
        )
        for name in ("created_after", "created_before", "ended_after", "ended_before")
    ),
    click.option("--dry-run", is_flag=True, help="Count the jobs it would change; change none."),
]


def _with_filters(command: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_FILTERS):
        command = option(command)
    return command


@jobs_cli.command("cancel")
@click.argument("job_id", required=False)
@_with_filters
def jobs_cancel(job_id: str | None, dry_run: bool, **filters: Any) -> None:
    """Cancel a PENDING, PAUSED or RUNNING job, or every one matching the filters."""
    _act("cancel", "canceled", "is not PENDING, PAUSED or RUNNING", job_id, dry_run, filters)


@jobs_cli.command("retry")
@click.argument("job_id", required=False)
@_with_filters
def jobs_retry(job_id: str | None, dry_run: bool, **filters: Any) -> None:
    """Retry a FAILED job now, or every one matching the filters."""
    _act("retry", "retried", "is not FAILED", job_id, dry_run, filters)


@jobs_cli.command("delete")
@click.argument("job_id", required=False)
@_with_filters
def jobs_delete(job_id: str | None, dry_run: bool, **filters: Any) -> None:
    """Delete a SUCCEEDED, FAILED or CANCELED job, or every one matching the filters."""
    _act("delete", "deleted", "has not ended", job_id, dry_run, filters)


_ONE_JOB: dict[str, Callable[[Runtime, str], bool]] = {
    "cancel": jobs.cancel,
    "retry": jobs.retry,
    "delete": jobs.delete,
}


def _act(
    action: str, verb: str, why_not: str, job_id: str | None, dry_run: bool, given: dict[str, Any]
) -> None:
    filters = {name: value for name, value in given.items() if value not in (None, ())}
    if job_id is not None:
        if filters or dry_run:
            raise click.UsageError("give a job id or filters, not both")
        if not _ONE_JOB[action](runtime.current(), job_id):
            raise click.ClickException(
                f"job {job_id} was not {verb}: it does not exist or {why_not}"
            )
        click.echo(f"job {job_id} {verb}")
        return
    if not filters:
        raise click.UsageError(f"give a job id or at least one filter (see --help) to {action}")
    current = runtime.current()
    n = bulk.change_matching(
        current,
        action,
        _filter_of(current, filters),
        actor=f"cli:{cli_user()}",
        role="cli",
        dry_run=dry_run,
    )
    _say_how_many(n, verb, dry_run)


def _filter_of(current: Runtime, filters: dict[str, Any]) -> JobFilter:
    """The store's filter for the given options (a usage error for a bad one)."""
    if "statuses" in filters:
        filters["status"] = [s.upper() for s in filters.pop("statuses")]
    for name in ("created_after", "created_before", "ended_after", "ended_before"):
        if name in filters:
            filters[name] = filters[name].replace(tzinfo=UTC)
    try:
        return jobs.job_filter(current, **filters)
    except (ValueError, InvalidOption) as exc:
        raise click.UsageError(str(exc)) from None


def _say_how_many(n: int, verb: str, dry_run: bool) -> None:
    noun = "job" if n == 1 else "jobs"
    click.echo(f"{n} {noun} would be {verb}" if dry_run else f"{n} {noun} {verb}")


def cli_user() -> str:
    """Who runs the command, for the audit trail."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (a bare container)
        return "unknown"


@click.group("signals")
def signals_cli() -> None:
    """Deliver or reject the signals WAITING jobs await."""


def _signal_target(target: str, by_id: bool) -> uuid.UUID | str:
    if not by_id:
        return target
    try:
        return job_id_of(target)
    except InvalidJobId as exc:
        raise click.UsageError(str(exc)) from None


@signals_cli.command("deliver")
@click.argument("target", required=False)
@click.option("--payload", default=None, help="The signal's payload, as JSON.")
@click.option("--id", "by_id", is_flag=True, help="TARGET is a job's id, not a signal key.")
@_with_filters
def deliver_signal(
    target: str | None, payload: str | None, by_id: bool, dry_run: bool, **given: Any
) -> None:
    """Make the jobs WAITING on the signal key TARGET (or the job TARGET, with --id), or every
    WAITING job matching the filters, due now."""
    value = None
    if payload is not None:
        try:
            value = json.loads(payload)
        except ValueError as exc:
            raise click.UsageError(f"--payload must be JSON: {exc}") from None
    filters = {name: v for name, v in given.items() if v not in (None, ())}
    current = runtime.current()
    try:
        if target is not None:
            if filters or dry_run:
                raise click.UsageError("give a signal key, a job id or filters, not several")
            n = signals.deliver(current, _signal_target(target, by_id), value)
        elif not filters:
            raise click.UsageError("give a signal key, a job id (--id) or at least one filter")
        else:
            where = _filter_of(current, filters)
            actor = f"cli:{cli_user()}"
            n = signals.deliver_matching(
                current, where, value, actor=actor, role="cli", dry_run=dry_run
            )
    except (ValueError, InvalidOption) as exc:
        raise click.UsageError(str(exc)) from None
    _say_how_many(n, "signaled", dry_run)


@signals_cli.command("reject")
@click.argument("target")
@click.option("--reason", required=True, help="Why: the jobs' error.")
@click.option("--id", "by_id", is_flag=True, help="TARGET is a job's id, not a signal key.")
def reject_signal(target: str, reason: str, by_id: bool) -> None:
    """End the jobs WAITING on TARGET FAILED, without running them, with --reason as error."""
    try:
        n = signals.reject(runtime.current(), _signal_target(target, by_id), reason)
    except (ValueError, InvalidOption) as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"{n} {'job' if n == 1 else 'jobs'} rejected")
