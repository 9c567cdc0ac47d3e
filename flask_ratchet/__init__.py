"""flask-ratchet: a persistent, database-backed job scheduler for Flask."""

from __future__ import annotations

from . import events
from .api.batches import BatchBuilder, BatchHandle, StreamingBatchBuilder
from .api.chains import FlowBuilder, FlowHandle
from .api.handles import JobHandle
from .api.recurring import RecurringJobBuilder
from .api.submit import JobBuilder
from .api.tasks import TaskFunction
from .breaker import BreakerSettings
from .context import BatchContext, JobContext
from .cron import CronError
from .errors import (
    ConfigError,
    DoNotRetry,
    DuplicateBusinessKey,
    IllegalTransition,
    InvalidJobId,
    InvalidOption,
    JobFailed,
    JobNotAuthorized,
    JobNotFound,
    PayloadError,
    PayloadTooLarge,
    RatchetError,
    SchemaNotReady,
    TaskNotAllowed,
    UnknownTask,
    WaitInTransaction,
    WaitTimeout,
)
from .extension import Ratchet
from .job import BatchChild, BatchProgress, Job, Progress, QueueSummary
from .options import Backoff, Priority
from .paging import Page
from .recurring import Misfire, RecurringJob, RecurringStatus
from .retry import Retry
from .states import JobStatus

#: This version of flask-ratchet.
__version__ = "0.1.0.dev0"

__all__ = [
    "Backoff",
    "BatchBuilder",
    "BatchChild",
    "BatchContext",
    "BatchHandle",
    "BatchProgress",
    "BreakerSettings",
    "ConfigError",
    "CronError",
    "DoNotRetry",
    "DuplicateBusinessKey",
    "FlowBuilder",
    "FlowHandle",
    "IllegalTransition",
    "InvalidJobId",
    "InvalidOption",
    "Job",
    "JobBuilder",
    "JobContext",
    "JobFailed",
    "JobHandle",
    "JobNotAuthorized",
    "JobNotFound",
    "JobStatus",
    "Misfire",
    "Page",
    "PayloadError",
    "PayloadTooLarge",
    "Priority",
    "Progress",
    "QueueSummary",
    "Ratchet",
    "RatchetError",
    "RecurringJob",
    "RecurringJobBuilder",
    "RecurringStatus",
    "Retry",
    "SchemaNotReady",
    "StreamingBatchBuilder",
    "TaskFunction",
    "TaskNotAllowed",
    "UnknownTask",
    "WaitInTransaction",
    "WaitTimeout",
    "__version__",
    "events",
]
