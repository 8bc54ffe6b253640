"""The errors of the file editor, where OpenHands' SDK has them (``...file_editor.exceptions``).

They are cowconv's errors (:mod:`cowconv._exceptions`), so ``except CowconvError`` catches
them too.

>>> from cowconv.tools.file_editor.exceptions import ToolError
>>> issubclass(EditorToolParameterMissingError, ToolError)
True
"""

from cowconv._exceptions import (
    EditorToolParameterInvalidError,
    EditorToolParameterMissingError,
    FileValidationError,
    ToolError,
)

__all__ = [
    "EditorToolParameterInvalidError",
    "EditorToolParameterMissingError",
    "FileValidationError",
    "ToolError",
]
