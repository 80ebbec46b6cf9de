"""A private PostgreSQL cluster for the request-log tests, and a fresh database per test.

The cluster runs from Debian's ``postgresql`` package (``make test-tools`` installs
it) in a temporary directory, on a free loopback port, for the whole session.
PostgreSQL refuses to run as root, so as root its programs run as the ``postgres``
user. A missing PostgreSQL fails the tests that need it: it never skips them.

The cluster sorts text with ICU's English rules, as production databases usually
do, so a query that forgets ``COLLATE "C"`` orders ids differently from SQLite.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from hopbase.config import Secret

_SUPERUSER = "hopbase"
_PREFIX = "hopbase-pg-"  # then the test run's pid: hopbase-pg-<pid>-<random>
_databases = itertools.count()


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's ``bin`` directory; fails the test when there is none."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda path: int(path.parts[-3]) if path.parts[-3].isdigit() else 0)
    if not found:
        pytest.fail("PostgreSQL is not installed: run `make test-tools` "
                    "(or `apt-get install -y postgresql`) to get /usr/lib/postgresql/*/bin/initdb")
    return found[-1].parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_owner(command: list[str]) -> list[str]:
    """``command`` as the ``postgres`` user when we are root (PostgreSQL refuses root)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _run(command: list[str]) -> None:
    finished = subprocess.run(_as_owner(command), capture_output=True, text=True, check=False)
    if finished.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed:\n{finished.stdout}{finished.stderr}")


def _start_cluster(bin_dir: Path, home: Path, port: int) -> None:
    data = home / "data"
    _run([str(bin_dir / "initdb"), "-D", str(data), "-U", _SUPERUSER, "--auth=trust",
          "--no-sync", "--encoding=UTF8", "--locale=C.UTF-8",
          "--locale-provider=icu", "--icu-locale=en"])
    options = (f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off"
               " -c synchronous_commit=off -c full_page_writes=off")
    _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(home / "server.log"),
          "-o", options, "-w", "-t", "30", "start"])


def _stop_cluster(bin_dir: Path, home: Path) -> None:
    if (home / "data" / "postmaster.pid").exists():
        subprocess.run(_as_owner([str(bin_dir / "pg_ctl"), "-D", str(home / "data"),
                                  "-m", "fast", "-w", "stop"]),
                       capture_output=True, check=False)
    shutil.rmtree(home, ignore_errors=True)


def _stop_orphaned_clusters(bin_dir: Path) -> None:
    """Stop the clusters of earlier test runs that were killed before their teardown."""
    for home in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*-*"):
        owner = home.name.removeprefix(_PREFIX).split("-", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            _stop_cluster(bin_dir, home)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[str]:
    """The DSN of the cluster's maintenance database ``postgres``, for the whole session."""
    bin_dir = postgres_bin()
    _stop_orphaned_clusters(bin_dir)
    home = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
    if os.geteuid() == 0:
        shutil.chown(home, "postgres", "postgres")
    port = free_port()
    try:
        _start_cluster(bin_dir, home, port)
        yield f"postgresql://{_SUPERUSER}@127.0.0.1:{port}/postgres"
    finally:
        _stop_cluster(bin_dir, home)


@pytest.fixture
async def postgres_dsn(postgres_cluster: str) -> AsyncIterator[str]:
    """A DSN of an empty database of its own, dropped after the test."""
    name = f"hopbase_test_{os.getpid()}_{next(_databases)}"
    admin = await asyncpg.connect(postgres_cluster)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" STRATEGY FILE_COPY')
        yield postgres_cluster.rsplit("/", 1)[0] + "/" + name
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
def postgres_secret(postgres_dsn: str) -> Secret:
    """The test database's DSN as the config hands it over."""
    return Secret(env="HOPBASE_TEST_LOG_DSN", value=postgres_dsn)
