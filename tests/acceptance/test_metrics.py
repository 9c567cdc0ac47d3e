"""A real worker's Prometheus metrics, scraped over HTTP after a known workload."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable

from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from tests.acceptance.conftest import Workers, wait_until
from tests.apps import add, create_app, fail_until, ratchet, refuse


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value_of(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float],
) -> Callable[..., float]:
    def get(name: str, **labels: str) -> float:
        return samples.get((name, frozenset(labels.items())), 0.0)

    return get


def test_a_workers_metrics_count_what_it_did(app: Flask, workers: Workers) -> None:
    done = [add.enqueue(i, 1).id for i in range(3)]
    done.append(fail_until.enqueue(2).id)  # fails once, works on the retry (1 s later)
    done.append(refuse.enqueue("card expired").id)  # fails for good at once
    port = free_port()
    workers.start("--metrics-port", f"127.0.0.1:{port}")
    wait_until(lambda: all(ratchet.get_job(i).is_terminal for i in done), what="the jobs")  # type: ignore[union-attr]
    default = {"queue": "default"}
    add_task = {"task": "tests.apps:add", **default}
    flaky = {"task": "tests.apps:fail_until", **default}
    dead = {"task": "tests.apps:refuse", **default}

    def counted() -> bool:  # outcomes are counted once written; the scrape may come first
        get = value_of(scrape(port))
        return (
            get("ratchet_jobs_succeeded_total", **flaky) == 1
            and get("ratchet_jobs_dead_lettered_total", **dead) == 1
        )

    wait_until(counted, what="the outcomes to be counted")
    get = value_of(scrape(port))
    assert get("ratchet_jobs_claimed_total", **add_task) == 3
    assert get("ratchet_jobs_succeeded_total", **add_task) == 3
    assert get("ratchet_jobs_claimed_total", **flaky) == 2
    assert get("ratchet_jobs_failed_total", **flaky) == 1
    assert get("ratchet_jobs_retried_total", **flaky) == 1
    assert get("ratchet_jobs_dead_lettered_total", **flaky) == 0
    assert get("ratchet_jobs_failed_total", **dead) == 1
    assert get("ratchet_jobs_retried_total", **dead) == 0
    assert get("ratchet_job_run_seconds_count", **add_task) == 3
    assert get("ratchet_job_queue_wait_seconds_count", **flaky) == 2
    assert get("ratchet_worker_capacity") >= 10  # the default concurrency
    assert get("ratchet_worker_running_jobs") == 0
    assert get("ratchet_worker_last_poll_timestamp_seconds") > 1_700_000_000
    claims = get("ratchet_worker_claim_seconds_count")
    assert claims >= 3 and get("ratchet_worker_claim_seconds_bucket", le="+Inf") == claims
    assert get("process_cpu_seconds_total") > 0  # the standard process metrics
    # No job id in any label: the series are bounded by tasks and queues.
    assert not any(str(i) in str(key) for key in scrape(port) for i in done)


def test_a_bad_metrics_port_is_refused_by_the_command(database_url: str) -> None:
    runner = create_app(database_url).test_cli_runner()
    refused = runner.invoke(args=["ratchet", "worker", "--metrics-port", "99999"])
    assert refused.exit_code == 2
    assert "is not a metrics port" in refused.output
