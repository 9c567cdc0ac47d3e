"""The launcher the tests fork workers and CLI commands from starts them as a new interpreter
would: the same ``sys.path``, ``sys.argv``, ``__name__``, output and exit status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import preloaded

PROBE = (
    "import __main__, atexit, json, sys\n"
    "atexit.register(lambda: print(sys.modules['__main__'] is __main__))\n"
    "print(json.dumps([sys.path, sys.argv, __name__, vars(__main__) is globals()]))\n"
    "sys.exit(3)\n"
)


@pytest.mark.parametrize("form", ["-c", "script", "-m"])
def test_a_command_sees_what_a_new_interpreter_sees(tmp_path: Path, form: str) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    args = {
        "-c": ["-c", PROBE, "one"],
        "script": [str(tmp_path / "probe.py"), "one"],
        "-m": ["-m", "probe", "one"],
    }[form]
    env = os.environ | {"PYTHONPATH": str(tmp_path)}
    forked = preloaded.run(args, env=env, cwd=tmp_path, timeout=60)
    new = subprocess.run(
        [sys.executable, *args], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert (forked.returncode, forked.stdout, forked.stderr) == (3, new.stdout, new.stderr)


def test_an_error_goes_to_its_standard_error_and_a_signal_is_its_exit_status(
    tmp_path: Path,
) -> None:
    failed = preloaded.run(
        ["-c", "print('out'); raise ValueError('in the child')"],
        env=dict(os.environ),
        cwd=tmp_path,
        timeout=60,
    )
    assert failed.returncode == 1 and failed.stdout == "out\n"
    assert failed.stderr.endswith("ValueError: in the child\n"), failed.stderr

    log = tmp_path / "log"
    sleeper = preloaded.launcher().start(
        ["-c", "import time; print('up', flush=True); time.sleep(60)"],
        dict(os.environ),
        tmp_path,
        log,
    )
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(0.2)
    sleeper.send_signal(signal.SIGTERM)
    assert sleeper.wait(30) == -signal.SIGTERM
    assert sleeper.poll() == -signal.SIGTERM
    sleeper.kill()  # ended: nothing is sent (its pid may be another process's by now)


def test_a_command_that_cannot_start_is_an_error_before_any_fork(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no folder"):
        preloaded.launcher().start(
            ["-c", "pass"], dict(os.environ), tmp_path / "gone", tmp_path / "log"
        )
    # The launcher goes on: the next command runs.
    done = preloaded.run(["-c", "print('next')"], env=dict(os.environ), cwd=tmp_path, timeout=60)
    assert (done.returncode, done.stdout) == (0, "next\n")
