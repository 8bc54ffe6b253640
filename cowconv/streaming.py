"""Streamed LLM answers: the chunk type token callbacks receive.

OpenHands' SDK's ``openhands.sdk.llm.streaming`` names litellm's
``ModelResponseStream`` (one chunk of a streamed answer); so does cowconv.
The name loads litellm on first use (seconds, once per process), not when
this module is imported.

>>> from cowconv.streaming import ModelResponseStream
>>> ModelResponseStream.__name__
'ModelResponseStream'
"""

import importlib
from typing import TYPE_CHECKING, Any

from cowconv.core.llm import LLM, TokenCallbackType

if TYPE_CHECKING:
    from litellm.types.utils import ModelResponseStream

    LLMStreamChunk = ModelResponseStream

__all__ = ["LLMStreamChunk", "ModelResponseStream", "TokenCallbackType"]


def __getattr__(name: str) -> Any:
    # ``LLMStreamChunk`` is OpenHands' SDK's other name for a chunk.
    if name in ("ModelResponseStream", "LLMStreamChunk"):
        LLM.preload()  # litellm as cowconv imports it (its local price list, not the internet)
        chunk = importlib.import_module("litellm.types.utils").ModelResponseStream
        globals()["ModelResponseStream"] = globals()["LLMStreamChunk"] = chunk
        return chunk
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
