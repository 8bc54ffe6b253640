"""``PlanningFileEditorTool``: OpenHands' ``planning_file_editor``, the file editor that edits
only the plan.

>>> import os, tempfile
>>> from cowconv import Workspace
>>> root = tempfile.mkdtemp()
>>> [editor] = PlanningFileEditorTool.create(Workspace(working_dir=root))
>>> editor.name, os.path.relpath(editor.plan_path, root)
('planning_file_editor', '.agents_tmp/PLAN.md')
>>> from cowconv.tools.file_editor import FileEditorAction
>>> other = os.path.join(root, "main.py")
>>> editor(FileEditorAction(command="create", path=other, file_text="x")).is_error
True

It is :class:`~cowconv.tools.file_editor.FileEditorTool` with every
command but ``view`` limited to one file, ``PLAN.md`` (by default
``.agents_tmp/PLAN.md`` under the workspace; a ``PLAN.md`` at the workspace
root is used instead when one is there, as OpenHands does). The file is
created with the plan's section headers when the tool is made. Its undo
history, like the file editor's, is rebuilt from the conversation's events.
Its calls are recorded as the file editor's actions and observations
(``FileEditorAction``, ``FileEditorObservation``) under this tool's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from cowconv._exceptions import InvalidTypeError, InvalidValueError
from cowconv.agent.tools import register_tool
from cowconv.core.workspace import Workspace
from cowconv.tools.file_editor import FileEditorTool

__all__ = ["PLAN_FILENAME", "PLAN_HEADERS", "PlanningFileEditorTool", "plan_headers"]

PLAN_FILENAME = "PLAN.md"
#: The sections a plan has, in order (OpenHands' planning agent's structure).
PLAN_HEADERS = (
    "OBJECTIVE",
    "CONTEXT SUMMARY",
    "APPROACH OVERVIEW",
    "IMPLEMENTATION STEPS",
    "TESTING AND VALIDATION",
)
_PLAN_DIRECTORY = ".agents_tmp"

_RESTRICTION = """

IMPORTANT RESTRICTION FOR PLANNING AGENT:
* You can VIEW any file in the workspace using the 'view' command
* You can ONLY EDIT the PLAN.md file (all other edit operations will be rejected)
* PLAN.md is created with its section headers at the plan path
* All editing commands (create, str_replace, insert, undo_edit) are restricted to PLAN.md only
* The PLAN.md file already contains the required section structure - fill in the content
"""


def plan_headers() -> str:
    """The text a new ``PLAN.md`` starts with: one numbered header per section.

    >>> print(plan_headers().splitlines()[0])
    # 1. OBJECTIVE
    """
    return "\n".join(f"# {number}. {title}\n" for number, title in enumerate(PLAN_HEADERS, 1))


class PlanningFileEditorTool(FileEditorTool):
    """The file editor of OpenHands' planning agent: views anything, edits only ``PLAN.md``.

    ``Tool(name="planning_file_editor", params={"plan_path": "/abs/PLAN.md"})``
    sets where the plan is; a relative path is an :class:`~cowconv.InvalidValueError`.

    >>> import tempfile
    >>> from cowconv import Workspace
    >>> PlanningFileEditorTool.create(Workspace(working_dir=tempfile.mkdtemp()), plan_path="p.md")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: plan_path must be an absolute path, got: 'p.md'
    """

    name = "planning_file_editor"
    catalog_description: ClassVar[str] = "View files and edit the plan (PLAN.md) only."
    plan_path: str = ""

    @classmethod
    def create(  # type: ignore[override]
        cls, conv_state: Any = None, params: Mapping[str, Any] | None = None, **options: Any
    ) -> list[FileEditorTool]:
        """A one-tool list; makes the plan file with its headers when it is not there."""
        settings = {**(params or {}), **options}
        plan_path = settings.pop("plan_path", None)
        if settings:
            raise InvalidTypeError(
                f"the planning_file_editor tool takes plan_path only, got {sorted(settings)}"
            )
        workspace = conv_state if isinstance(conv_state, Workspace) else None
        if workspace is None:
            workspace = getattr(conv_state, "workspace", None)
        if not isinstance(workspace, Workspace):
            raise InvalidTypeError(
                f"{cls.__name__}.create() takes a conversation state or a Workspace, "
                f"got {type(conv_state).__name__}"
            )
        if plan_path is not None and not (
            isinstance(plan_path, str) and Path(plan_path).is_absolute()
        ):
            raise InvalidValueError(f"plan_path must be an absolute path, got: {plan_path!r}")
        if plan_path is None:
            root = Path(workspace.working_dir).resolve()
            legacy = root / PLAN_FILENAME
            plan_path = str(legacy if legacy.exists() else root / _PLAN_DIRECTORY / PLAN_FILENAME)
        plan = Path(plan_path)
        if not plan.exists():
            plan.parent.mkdir(parents=True, exist_ok=True)
            plan.write_text(plan_headers(), encoding="utf-8")
        tools = super().create(conv_state, allowed_edits_files=[plan_path])
        for tool in tools:
            assert isinstance(tool, PlanningFileEditorTool)  # made by cls, this class
            tool.description = (
                f"{tool.description}{_RESTRICTION}\nYour PLAN.md location: {plan_path}\n"
                "This plan file will be accessible to other agents in the workflow."
            )
            tool.plan_path = plan_path
        return tools


register_tool(PlanningFileEditorTool.name, PlanningFileEditorTool)
