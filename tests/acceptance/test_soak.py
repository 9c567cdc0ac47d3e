"""Two minutes of the soak (``bench.soak``): 50 jobs a second enqueued singly, retries,
recurring masters and a 20-second retention, drained by two real workers, on a PostgreSQL
server of the test's own (autovacuum on, as in production; the machine's server may have it
off). Nothing grows without bound: the hot table stops growing once warm and vacuum keeps its
dead tuples down (no worker holds a snapshot that would keep them), the drain leaves in it only
the recurring children, and retention archives every job past its horizon.

PostgreSQL only: the figures are its statistics (sizes, dead tuples, autovacuum runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import MASTERS, Result, Settings, run
from bench.soak_sample import Sample, TableStats
from tests.replica import ReplicaError

RATE = 50.0
HORIZON = 20.0  # retention: ended jobs archived this many seconds after they ended
EVERY = 5.0  # how often retention runs
SAMPLE = 10.0
#: The first sample counted as warm: ended jobs have been archived for a while.
WARM = HORIZON + 2 * EVERY
#: Autovacuum looks at the database every second: the steady state comes within the test.
SERVER = "autovacuum_naptime = 1\nfsync = off\nsynchronous_commit = off\n"


def hot(sample: Sample) -> TableStats:
    return sample.tables["ratchet_job_queue"]


@pytest.fixture(scope="module")
def soaked(tmp_path_factory: pytest.TempPathFactory) -> Result:
    settings = Settings(
        minutes=2,
        rate=RATE,
        sample_seconds=SAMPLE,
        retention_seconds=HORIZON,
        retention_interval=EVERY,
        # Past the horizon after the drain: retention has archived every job the soak made.
        settle_seconds=HORIZON + 3 * EVERY,
        own_server=True,
        server_settings=SERVER,
        out=Path(tmp_path_factory.mktemp("soak")),
        plot=False,
        database="ratchet_soak",
    )
    try:
        result = run(settings)
    except ReplicaError as exc:
        pytest.fail(str(exc), pytrace=False)
    print(result.summary)  # shown beside a failure
    return result


@pytest.mark.slow
def test_a_soak_leaves_no_unbounded_growth(soaked: Result) -> None:
    samples = [x for x in soaked.samples if x.phase == "soak"]
    warm = [x for x in samples if x.elapsed >= WARM]
    final = soaked.samples[-1]
    enqueued = sum(x.enqueued for x in soaked.samples)
    assert soaked.drained
    assert enqueued > 0 and final.phase == "drain"

    # The hot table: after the drain only the recurring masters' children are live (at most
    # one each); its size stopped growing once warm (without vacuum it grows with every job:
    # 2.7 times from 30 s to the end); vacuum keeps its dead tuples to seconds' worth (about
    # 2 a job; without vacuum, or with a snapshot held open, 7,000 to 13,000 in the second
    # half).
    assert final.pending + final.running <= MASTERS
    assert hot(final).total <= 2 * hot(warm[0]).total, [hot(x).total for x in samples]
    assert max(hot(x).dead for x in warm) <= 2500, [hot(x).dead for x in samples]

    # Retention: no ended job outlives the horizon by more than two passes, so the cold table
    # holds at most the horizon's worth of jobs (about 1,300 here, 6,000 without retention),
    # and after the drain and one horizon more only recurring children remain there: every
    # job the soak enqueued is in the archive.
    assert [x.overdue for x in soaked.samples] == [0] * len(soaked.samples)
    assert max(x.cold_rows for x in samples) <= (RATE + 1) * (HORIZON + 2 * EVERY + SAMPLE)
    assert final.cold_rows <= 60
    assert final.archive_rows >= enqueued
