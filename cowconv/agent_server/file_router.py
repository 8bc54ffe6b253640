"""The agent server's file routes (OpenHands' ``file_router``): upload and download a file.

``file_router`` is an :class:`fastapi.APIRouter` with the prefix ``/file``;
:func:`~cowconv.agent_server.create_app` mounts it under ``/api`` behind the
session key. ``POST /api/file/upload?path=/abs/path`` (a multipart ``file``)
writes a file on the server's machine, ``GET /api/file/download?path=/abs/path``
answers one; ``Workspace(host=...).file_upload`` and ``file_download`` call them.
Paths must be absolute, as in OpenHands' SDK; a bad path is a 422 (OpenHands: 400), as
every malformed request to this server is.

>>> import tempfile, pathlib
>>> from fastapi import FastAPI
>>> from fastapi.testclient import TestClient
>>> app = FastAPI()
>>> app.include_router(file_router, prefix="/api")
>>> client = TestClient(app)
>>> target = str(pathlib.Path(tempfile.mkdtemp()) / "notes.txt")
>>> client.post("/api/file/upload", params={"path": target},
...             files={"file": ("notes.txt", b"hello")}).json()
{'success': True, 'file_size': 5}
>>> client.get("/api/file/download", params={"path": target}).content
b'hello'
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, UploadFile
from fastapi.responses import FileResponse
from pydantic import BaseModel

from cowconv._exceptions import InvalidValueError
from cowconv.agent_server.conversation_router import errors

__all__ = ["FileUploadResult", "file_router"]


class FileUploadResult(BaseModel):
    """What an upload wrote (OpenHands' SDK's ``FileUploadResult``).

    >>> FileUploadResult(file_size=5).success
    True
    """

    success: bool = True
    file_size: int | None = None


file_router = APIRouter(prefix="/file", tags=["files"], responses=errors(404, 422))

PathQuery = Annotated[str, Query(min_length=1, description="An absolute path on the server")]


def _absolute(path: str) -> Path:
    if "\x00" in path or not os.path.isabs(path):
        raise InvalidValueError("Path must be absolute")
    return Path(path)


@file_router.post("/upload")
def upload_file(path: PathQuery, file: UploadFile) -> FileUploadResult:
    """Write the uploaded file at ``path`` (its directories made); all or nothing."""
    target = _absolute(path)
    if target.is_dir():
        raise InvalidValueError("Path is a directory")
    partial = target.with_name(f".{target.name}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "wb") as out:
            shutil.copyfileobj(file.file, out)
        os.replace(partial, target)
    except (FileExistsError, NotADirectoryError):
        raise InvalidValueError("A parent of the path is not a directory") from None
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise InvalidValueError(f"cannot write {path!r}: {error}") from None
    return FileUploadResult(file_size=target.stat().st_size)


@file_router.get("/download", response_class=FileResponse)
def download_file(path: PathQuery) -> FileResponse:
    """The file at ``path``, as ``application/octet-stream``."""
    target = _absolute(path)
    if not target.exists():
        raise HTTPException(status_code=404, detail="File not found")
    if not target.is_file():
        raise InvalidValueError("Path is not a file")
    return FileResponse(path=target, filename=target.name, media_type="application/octet-stream")
