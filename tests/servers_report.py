"""After a failed CI run: are the database servers the suite ran on still up, and since when?

A server that crashed or restarted mid-run fails hundreds of tests with "connection refused";
this names it, and prints the end of its log where the machine keeps one, so the cause is on the
page instead of lost with the machine. Run as ``python -m tests.servers_report``."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from tests.conftest import MARIADB_SERVER, PG_SERVER

#: Where Debian's packages write the servers' logs.
LOGS = {
    "PostgreSQL": Path("/var/log/postgresql/postgresql-15-main.log"),
    "MariaDB": Path("/var/log/mysql/error.log"),
}
UPTIME = {
    "PostgreSQL": "SELECT (now() - pg_postmaster_start_time())::text",
    "MariaDB": "SELECT CONCAT(VARIABLE_VALUE, ' s') FROM information_schema.GLOBAL_STATUS "
    "WHERE VARIABLE_NAME = 'UPTIME'",
}


def report(name: str, url: str) -> None:
    engine = sa.create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            print(f"{name}: up for {conn.exec_driver_sql(UPTIME[name]).scalar()}")
    except sa.exc.OperationalError as exc:
        print(f"{name}: UNREACHABLE ({str(exc.orig).strip()})")
    finally:
        engine.dispose()
    log = LOGS[name]
    if log.exists():
        lines = log.read_text(errors="replace").splitlines()[-40:]
        print(f"-- the end of {log} --", *lines, sep="\n")


if __name__ == "__main__":
    report("PostgreSQL", PG_SERVER)
    report("MariaDB", MARIADB_SERVER)
