"""How long a worker spends on a huge error before it can write the outcome.

    python -m bench.sanitize [--size 10000000] [--runs 3]

A job that raises an exception whose message is ``--size`` characters long: the time to turn it
into the error column (``retry.describe``) and the traceback column (``retry.format_traceback``),
and the time of ``retry.sanitize`` and of the console's masking (of a key and its value in JSON,
and of stored text such as an error or a log line) over texts of that size, for
several shapes of text (plain, a run of one word character, words joined by dashes, secret words
over and over, URL fragments, ``key=`` pairs). The worker holds the GIL all that time, so its
heartbeat waits as long. The median of ``--runs`` runs is printed for each; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from flask_ratchet.console import present
from flask_ratchet.retry import describe, format_traceback, sanitize

#: The shapes of text timed, each made ``size`` characters long by repeating its unit.
SHAPES: dict[str, str] = {
    "plain words": "lorem ipsum dolor ",
    "one word character": "x",
    "dashed words": "a-",
    "secret words": "password",
    "dashed secret words": "token-",
    "URL fragments": "a://b:",
    "key= pairs": "password=",
    "open quotes": "secret='",
    "camelCase key": "aB",
}


def text_of(unit: str, size: int) -> str:
    """``unit`` repeated to ``size`` characters."""
    return (unit * (size // len(unit) + 1))[:size]


def failure(message: str) -> BaseException:
    """An exception with ``message``, raised and caught so that it carries a traceback."""
    try:
        raise ValueError(message)
    except ValueError as exc:
        return exc


def median_seconds(work: Callable[[], object], runs: int) -> float:
    """The median wall time of ``runs`` calls of ``work``."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000_000, help="characters of text")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.size:,} characters, median of {args.runs} runs")
    columns = ("describe", "traceback", "sanitize", "page JSON", "page text")
    print(f"{'shape':<22} " + " ".join(f"{c:>10}" for c in columns))
    for name, unit in SHAPES.items():
        figures = timings(text_of(unit, args.size), args.runs)
        print(f"{name:<22} " + " ".join(f"{f * 1000:>8.1f}ms" for f in figures))


def timings(text: str, runs: int) -> list[float]:
    """Seconds to describe, format and sanitise an error of ``text``, and to mask it as the
    console does: as a key and its value, and as stored text (an error, a log line)."""
    exc = failure(text)
    return [
        median_seconds(lambda: describe(exc), runs),
        median_seconds(lambda: format_traceback(exc), runs),
        median_seconds(lambda: sanitize(text), runs),
        median_seconds(lambda: present.masked({text: text}), runs),
        median_seconds(lambda: present.masked_text(text), runs),
    ]


if __name__ == "__main__":
    main()
