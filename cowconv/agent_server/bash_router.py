"""The agent server's command route (OpenHands' ``bash_router``): run a command, wait for it.

``bash_router`` is an :class:`fastapi.APIRouter` with the prefix ``/bash``;
:func:`~cowconv.agent_server.create_app` mounts it under ``/api`` behind the
session key, as the other routes. ``POST /api/bash/execute_bash_command``
runs a bash command on the server's machine (in ``cwd``, else the server's
working directory) and answers its whole output as one ``BashOutput``; it is
what ``Workspace(host=...).execute_command(...)`` calls.

>>> from fastapi import FastAPI
>>> from fastapi.testclient import TestClient
>>> app = FastAPI()
>>> app.include_router(bash_router, prefix="/api")
>>> answer = TestClient(app).post("/api/bash/execute_bash_command",
...                               json={"command": "echo hi", "cwd": "."}).json()
>>> answer["kind"], answer["exit_code"], answer["stdout"]
('BashOutput', 0, 'hi\\n')
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field, ValidationInfo, field_validator

from cowconv.agent_server.conversation_router import errors
from cowconv.agent_server.decoding import DecodingRoute
from cowconv.core.commands import run_command
from cowconv.core.frozen import check_text

__all__ = ["BashOutput", "ExecuteBashRequest", "bash_router"]

MAX_TIMEOUT = 24 * 60 * 60
"""The longest a command may be given (seconds): a day."""


class ExecuteBashRequest(BaseModel):
    """A command to run (OpenHands' SDK's ``ExecuteBashRequest``).

    >>> ExecuteBashRequest(command="ls").timeout
    300
    """

    command: str = Field(description="The bash command to execute")
    cwd: str | None = Field(
        default=None, description="The directory to run it in (the server's own if none)"
    )
    timeout: int = Field(
        default=300,
        ge=1,
        le=MAX_TIMEOUT,
        description="The max number of seconds a command may be permitted to run.",
    )

    @field_validator("command", "cwd")
    @classmethod
    def _encodable(cls, value: str | None, info: ValidationInfo) -> str | None:
        # A lone surrogate cannot go to a process (arguments are bytes): a 422, not a 500.
        return None if value is None else check_text(value, str(info.field_name))


class BashOutput(BaseModel):
    """A finished command's output (OpenHands' SDK's ``BashOutput``; one piece, order 0).

    ``exit_code`` is -1 for a command stopped at its timeout (``stderr`` then
    ends with "Command timed out after N seconds").

    >>> BashOutput(command_id="c1", exit_code=0, stdout="hi").kind
    'BashOutput'
    """

    kind: Literal["BashOutput"] = "BashOutput"
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    timestamp: datetime = Field(default_factory=lambda: datetime.now(UTC))
    command_id: str
    order: int = 0
    exit_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


bash_router = APIRouter(
    prefix="/bash",
    route_class=DecodingRoute,  # bodies decoded without recursing, as every JSON door
    tags=["bash"],
    responses=errors(422),
)


@bash_router.post("/execute_bash_command")
def execute_bash_command(request: ExecuteBashRequest) -> BashOutput:
    """Run a bash command and wait for it (a worker thread waits, not the event loop).

    A ``cwd`` that is not a directory of the server's machine is a 422.
    """
    result = run_command(
        request.command,
        cwd=os.getcwd() if request.cwd is None else request.cwd,
        timeout=request.timeout,
    )
    return BashOutput(
        command_id=uuid.uuid4().hex,
        exit_code=result.exit_code,
        stdout=result.stdout or None,
        stderr=result.stderr or None,
    )
