from __future__ import annotations

import os
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from flask_ratchet import ids


def test_layout_is_rfc_9562_version_7() -> None:
    value = ids.uuid7()
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert (value.int >> 76) & 0xF == 7
    assert (value.int >> 62) & 0b11 == 0b10


def test_timestamp_reads_back_and_is_never_ahead_of_the_clock() -> None:
    before = datetime.now(UTC).replace(microsecond=(datetime.now(UTC).microsecond // 1000) * 1000)
    before = before - timedelta(milliseconds=1)
    value = ids.uuid7()
    after = datetime.now(UTC)
    stamp = ids.timestamp_of(value)
    assert before <= stamp <= after


def test_monotonic_within_a_millisecond_and_across_threads() -> None:
    made: list[uuid.UUID] = []
    lock = threading.Lock()

    def make() -> None:
        local = [ids.uuid7() for _ in range(5000)]
        assert local == sorted(local)
        with lock:
            made.extend(local)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 20000
    same_ms = [v for v in made if v.int >> 80 == made[0].int >> 80]
    assert len(same_ms) >= 1


def test_counter_overflow_waits_for_the_next_millisecond() -> None:
    values = [ids.uuid7() for _ in range(10000)]  # more than 4096 fit in one millisecond
    assert values == sorted(values)
    assert all(ids.timestamp_of(v) <= datetime.now(UTC) for v in values[-5:])


def test_timestamp_of_refuses_other_versions() -> None:
    with pytest.raises(ValueError, match="version 4 UUID"):
        ids.timestamp_of(uuid.uuid4())


def test_a_forked_child_never_repeats_its_parents_next_random_bits() -> None:
    ids.uuid7()  # the parent has random bytes in hand
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id's random part, to the parent
        os.write(write, ids.uuid7().bytes)
        os._exit(0)
    os.waitpid(pid, 0)
    child = uuid.UUID(bytes=os.read(read, 16))
    os.close(read)
    os.close(write)
    parent = ids.uuid7()
    low_62_bits = (1 << 62) - 1
    assert child.int & low_62_bits != parent.int & low_62_bits
