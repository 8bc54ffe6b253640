"""``Workspace``: where an agent's tools run.

>>> Workspace(working_dir="/tmp").is_remote
False
>>> Workspace.coerce("/tmp").working_dir
'/tmp'
"""

import contextlib
import os
from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_serializer,
)

from cowconv._exceptions import InvalidTypeError, InvalidValueError
from cowconv.core.commands import (
    CommandResult,
    FileOperationResult,
    copy_file,
    remote_command,
    remote_download,
    remote_upload,
    run_command,
)
from cowconv.core.frozen import CheckedModel
from cowconv.core.llm import dump_secret

__all__ = ["SESSION_API_KEY_HEADER", "LocalWorkspace", "RemoteWorkspace", "Workspace"]

SESSION_API_KEY_HEADER = "X-Session-API-Key"
"""The header carrying the agent server's session API key (OpenHands' SDK's name)."""


class Workspace(CheckedModel):
    """A working directory, on this machine or on an agent server (``host``).

    With ``host`` set, ``Conversation(workspace=...)`` talks to the agent
    server at that URL; ``api_key`` is then its session API key, masked in
    dumps like ``LLM.api_key`` unless the context says ``expose_secrets``.

    >>> Workspace(host="http://127.0.0.1:8000", working_dir="/srv/app").is_remote
    True
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    working_dir: str
    host: str | None = None
    api_key: SecretStr | None = None
    # cowconv's own: the directory of the workspace snapshot store (cowconv.workspaces); set,
    # the runtime records the files around every tool call. Omitted from the JSON when None.
    snapshot_store: str | None = None
    # cowconv's own: the directories this one's files were copied from (a fork's source
    # first), so a terminal's recorded directory in one of them is taken to mean this one.
    copied_from: tuple[str, ...] = ()
    # cowconv's own: files larger than this (bytes) are left out of this workspace's snapshots;
    # None: the snapshot store's limit (10 MiB by default). Omitted from the JSON when None.
    max_snapshot_file_size: Annotated[int, Field(strict=True, ge=0)] | None = None

    @field_validator("working_dir", "snapshot_store", mode="before")
    @classmethod
    def _path_to_str(cls, value: object) -> object:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("max_snapshot_file_size", mode="before")
    @classmethod
    def _whole_number(cls, value: object) -> object:
        # JSON Schema's integer (what the agent server publishes) includes 7118.0; a bool or
        # a fraction is still refused by the strict int.
        return int(value) if isinstance(value, float) and value.is_integer() else value

    @model_serializer(mode="wrap")
    def _omit_unset_store(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            if data.get("snapshot_store", False) is None:
                del data["snapshot_store"]
            if not data.get("copied_from", True):
                del data["copied_from"]
            if data.get("max_snapshot_file_size", False) is None:
                del data["max_snapshot_file_size"]
        return data

    def relocate(self, path: str) -> str:
        """``path`` in this workspace: one inside a directory the files were copied from is
        the same place in this one; any other path is returned as it is.

        >>> Workspace(working_dir="/w/fork", copied_from=("/w/src",)).relocate("/w/src/pkg")
        '/w/fork/pkg'
        """
        for origin in self.copied_from:
            if path == origin or path.startswith(origin.rstrip(os.sep) + os.sep):
                inside = os.path.relpath(path, origin)
                return self.working_dir if inside == "." else os.path.join(self.working_dir, inside)
        return path

    @field_validator("host", mode="after")
    @classmethod
    def _host_without_slash(cls, value: str | None) -> str | None:
        # As OpenHands' SDK: "http://h:8000/" and "http://h:8000" are the same server.
        return value.rstrip("/") if isinstance(value, str) and value.endswith("/") else value

    @field_serializer("api_key")
    def _dump_api_key(self, key: SecretStr | None, info: SerializationInfo) -> Any:
        return dump_secret(key, info)

    @property
    def is_remote(self) -> bool:
        """Whether this workspace lives on an agent server."""
        return self.host is not None

    def require_directory(self) -> "Workspace":
        """This workspace, once a local ``working_dir`` is known to be a directory.

        Tools run there, so a missing one is refused when a conversation is
        made (:class:`~cowconv.InvalidValueError`, also a ``ValueError``), not
        at its first ``run()``. A remote workspace is the server's to check.

        >>> Workspace(working_dir="/no/such/dir").require_directory()
        Traceback (most recent call last):
        ...
        cowconv._exceptions.InvalidValueError: workspace directory '/no/such/dir' does not exist...
        """
        if not self.is_remote and not os.path.isdir(self.working_dir):
            problem = "is not a directory" if os.path.exists(self.working_dir) else "does not exist"
            raise InvalidValueError(
                f"workspace directory {self.working_dir!r} {problem}: create it, or pass an "
                "existing directory"
            )
        return self

    def execute_command(
        self,
        command: str,
        cwd: "str | os.PathLike[str] | None" = None,
        timeout: float = 30.0,
    ) -> CommandResult:
        """Run a bash command in this workspace (in ``cwd``, else ``working_dir``).

        Locally a subprocess (its process group is killed at ``timeout``: exit
        code -1 and ``timeout_occurred``); on an agent server its
        ``/api/bash/execute_bash_command`` route. As in OpenHands' SDK, a
        command that cannot reach the server is reported in the result (exit
        code -1, ``stderr`` says why) rather than raised.

        >>> Workspace(working_dir=".").execute_command("echo hello").stdout
        'hello\\n'
        """
        directory = self.working_dir if cwd is None else os.fspath(cwd)
        if not self.is_remote:
            return run_command(command, cwd=directory, timeout=timeout)
        with self._http() as client:
            return remote_command(client, command, cwd=directory, timeout=timeout)

    def file_upload(
        self,
        source_path: "str | os.PathLike[str]",
        destination_path: "str | os.PathLike[str]",
    ) -> FileOperationResult:
        """Put a file of this machine into the workspace (locally, a copy).

        On an agent server a relative ``destination_path`` is taken in ``working_dir``.

        A failure is in the result (``success`` false, ``error``), as in
        OpenHands' SDK.

        >>> Workspace(working_dir=".").file_upload("/no/such/file", "copy.txt").success
        False
        """
        if not self.is_remote:
            return copy_file(source_path, destination_path)
        with self._http() as client:
            return remote_upload(client, source_path, self._on_server(destination_path))

    def file_download(
        self,
        source_path: "str | os.PathLike[str]",
        destination_path: "str | os.PathLike[str]",
    ) -> FileOperationResult:
        """Fetch a file of the workspace to this machine (locally, a copy).

        >>> Workspace(working_dir=".").file_download("/no/such/file", "copy.txt").success
        False
        """
        if not self.is_remote:
            return copy_file(source_path, destination_path)
        with self._http() as client:
            return remote_download(client, self._on_server(source_path), destination_path)

    def _on_server(self, path: "str | os.PathLike[str]") -> str:
        """A server path: a relative one is taken in ``working_dir`` (the server wants it whole)."""
        text = os.fspath(path)
        return text if text.startswith("/") else f"{self.working_dir.rstrip('/')}/{text}"

    @contextlib.contextmanager
    def _http(self) -> Iterator[Any]:
        """An ``httpx.Client`` for the server: a remote workspace's own, else one for the call."""
        if isinstance(self, RemoteWorkspace):
            yield self.client
            return
        with self.new_client() as client:
            yield client

    def new_client(self, timeout: float | Any = 60.0, transport: Any = None) -> Any:
        """A new ``httpx.Client`` for the agent server at :attr:`host`, sending :attr:`api_key`
        (the caller closes it). Its pool lets go of idle connections before the server does,
        and a read met by a connection closed under it is sent again
        (:func:`cowconv.core.http.server_client`); ``transport`` is what it sends through,
        when given.

        >>> workspace = Workspace(host="http://127.0.0.1:8000/", working_dir=".", api_key="k")
        >>> with workspace.new_client() as client:
        ...     print(client.base_url, client.headers[SESSION_API_KEY_HEADER])
        http://127.0.0.1:8000 k
        >>> Workspace(working_dir=".").new_client()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        cowconv._exceptions.InvalidValueError: a workspace ... has no agent server to connect to
        """
        if self.host is None:
            raise InvalidValueError(
                "a workspace on this machine (no host) has no agent server to connect to"
            )
        from cowconv.core.http import server_client  # a workspace value never loads httpx

        headers = {}
        if self.api_key is not None:
            headers[SESSION_API_KEY_HEADER] = self.api_key.get_secret_value()
        return server_client(self.host, headers=headers, timeout=timeout, transport=transport)

    @classmethod
    def coerce(cls, value: "Workspace | str | os.PathLike[str]") -> "Workspace":
        """A workspace from a ``Workspace`` or a path (a :class:`LocalWorkspace` becomes the
        plain ``Workspace`` it is, which a snapshot stores and loads back unchanged).

        >>> type(Workspace.coerce(LocalWorkspace(working_dir="/tmp"))).__name__
        'Workspace'
        """
        if isinstance(value, LocalWorkspace):
            return Workspace(
                working_dir=value.working_dir,
                snapshot_store=value.snapshot_store,
                copied_from=value.copied_from,
                max_snapshot_file_size=value.max_snapshot_file_size,
            )
        if isinstance(value, Workspace):
            return value
        if isinstance(value, str | os.PathLike):
            return cls(working_dir=os.fspath(value))
        raise InvalidTypeError(
            f"workspace must be a Workspace or a path, got {type(value).__name__}"
        )


class RemoteWorkspace(Workspace):
    """A :class:`Workspace` on an agent server: ``host`` is required (OpenHands' SDK's name).

    ``Conversation(agent, RemoteWorkspace(...))`` is typed as a
    :class:`~cowconv.RemoteConversation`; a ``Workspace(host=...)`` is just as
    remote, typed as a plain conversation.

    >>> RemoteWorkspace(host="http://127.0.0.1:8000", working_dir="/srv/app").is_remote
    True
    """

    host: str

    # OpenHands' RemoteWorkspace carries the HTTP client its conversations use (code written
    # for OpenHands assigns ``workspace._client``), and is told which conversations it holds
    # and what they cost. Private attributes: not fields, never dumped or compared as data.
    _client: Any = PrivateAttr(default=None)
    _conversation_ids: list[str] = PrivateAttr(default_factory=list)
    _accumulated_cost: float | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        """Equal when the fields are: the client and what was registered are not the value.

        >>> a = RemoteWorkspace(host="http://127.0.0.1:8000", working_dir=".")
        >>> a.register_conversation("c1")
        >>> a == RemoteWorkspace(host="http://127.0.0.1:8000/", working_dir=".")
        True
        """
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = Workspace.__hash__

    @property
    def client(self) -> Any:
        """The ``httpx.Client`` for the server (OpenHands' SDK's attribute), made on first use.

        Assign ``workspace._client`` (as code written for OpenHands' SDK does) to
        give conversations on this workspace another client; it stays the
        caller's to close.
        """
        if self._client is None:
            self._client = self.new_client()
        return self._client

    def register_conversation(self, conversation_id: str) -> None:
        """Note a conversation made on this workspace (OpenHands' SDK calls it on create).

        >>> workspace = RemoteWorkspace(host="http://127.0.0.1:8000", working_dir=".")
        >>> workspace.register_conversation("c1"); workspace.conversation_ids
        ('c1',)
        """
        self._conversation_ids.append(conversation_id)

    @property
    def conversation_ids(self) -> tuple[str, ...]:
        """The conversations created on this workspace, oldest first."""
        return tuple(self._conversation_ids)

    def register_cost(self, cost: float) -> None:
        """Add a closed conversation's LLM cost (OpenHands' SDK calls it on close).

        >>> workspace = RemoteWorkspace(host="http://127.0.0.1:8000", working_dir=".")
        >>> workspace.accumulated_cost is None
        True
        >>> workspace.register_cost(0.25); workspace.accumulated_cost
        0.25
        """
        self._accumulated_cost = (self._accumulated_cost or 0.0) + float(cost)

    @property
    def accumulated_cost(self) -> float | None:
        """The cost registered by closed conversations, ``None`` while none reported one."""
        return self._accumulated_cost


class LocalWorkspace(Workspace):
    """A :class:`Workspace` on this machine: no ``host`` (OpenHands' SDK's name).

    A conversation made with one keeps the plain :class:`Workspace` it
    stands for (:meth:`Workspace.coerce`), so its snapshots store as before.

    >>> LocalWorkspace(working_dir="/tmp").is_remote
    False
    """

    host: None = None
    api_key: None = None
