"""LLM messages as OpenHands defines them: ``Message``, its content parts, tool calls.

The same names, fields and JSON as OpenHands' ``openhands.sdk.llm`` message
models, held frozen (tuples instead of lists) so that the events holding
them can be shared by forks:

>>> message = Message(role="user", content=[TextContent(text="List the files.")])
>>> message.content
(TextContent(cache_prompt=False, type='text', text='List the files.'),)
>>> Message.model_validate_json(message.model_dump_json()) == message
True
>>> Message(role="user", content="Hi.").content[0].text  # a str becomes one TextContent
'Hi.'
>>> message.content[0].text = "changed"
Traceback (most recent call last):
...
cowconv._exceptions.FrozenInstanceError: TextContent is immutable (it may be shared by forks): ...
"""

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import ConfigDict, Discriminator, Tag, field_validator, model_validator

from cowconv.core.kinds import FrozenValue

__all__ = [
    "Content",
    "ImageContent",
    "Message",
    "MessageToolCall",
    "ReasoningItemModel",
    "RedactedThinkingBlock",
    "Role",
    "TextContent",
    "ThinkingBlock",
    "chat_content",
    "content_to_str",
]

Role: TypeAlias = Literal["user", "system", "assistant", "tool"]


class TextContent(FrozenValue):
    """A text part of a message (``cache_prompt``: mark it for the provider's prompt cache).

    >>> TextContent(text="hi").model_dump()
    {'cache_prompt': False, 'type': 'text', 'text': 'hi'}
    """

    model_config = ConfigDict(populate_by_name=True)

    cache_prompt: bool = False
    type: Literal["text"] = "text"
    text: str

    @model_validator(mode="before")
    @classmethod
    def _drop_deprecated(cls, data: Any) -> Any:
        # OpenHands' older events carry it; it no longer means anything.
        if isinstance(data, dict) and "enable_truncation" in data:
            return {key: value for key, value in data.items() if key != "enable_truncation"}
        return data


class ImageContent(FrozenValue):
    """Images of a message, given by URL (``data:`` URLs included).

    >>> ImageContent(image_urls=["https://example.com/a.png"]).image_urls
    ('https://example.com/a.png',)
    """

    cache_prompt: bool = False
    type: Literal["image"] = "image"
    image_urls: tuple[str, ...]


def _content_type(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("type")
        if kind is None:
            return "image" if "image_urls" in value else "text"
        return str(kind)
    return str(getattr(value, "type", "text"))


Content: TypeAlias = Annotated[
    Annotated[TextContent, Tag("text")] | Annotated[ImageContent, Tag("image")],
    Discriminator(_content_type),
]
"""A message content part: :class:`TextContent` or :class:`ImageContent` (by ``type``)."""


def content_to_str(contents: Sequence[TextContent | ImageContent]) -> list[str]:
    """Each part as text; images as ``[Image: n URLs]`` (for display).

    >>> content_to_str([TextContent(text="a"), ImageContent(image_urls=["u"])])
    ['a', '[Image: 1 URLs]']
    """
    return [
        part.text if isinstance(part, TextContent) else f"[Image: {len(part.image_urls)} URLs]"
        for part in contents
    ]


def chat_content(parts: Sequence[Any]) -> str | list[dict[str, Any]]:
    """Content parts in OpenAI chat format: one string if all are text, else typed parts.

    >>> chat_content([TextContent(text="a"), TextContent(text="b")])
    'ab'
    >>> chat_content([TextContent(text="see"), ImageContent(image_urls=["u"])])[1]
    {'type': 'image_url', 'image_url': {'url': 'u'}}
    """
    if all(isinstance(part, TextContent) for part in parts):
        return "".join(part.text for part in parts if isinstance(part, TextContent))
    encoded: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextContent):
            encoded.append({"type": "text", "text": part.text})
        elif isinstance(part, ImageContent):
            encoded.extend({"type": "image_url", "image_url": {"url": u}} for u in part.image_urls)
    return encoded


class MessageToolCall(FrozenValue):
    """A tool call of a model's answer; ``arguments`` is the JSON text the model wrote.

    >>> MessageToolCall(id="c1", name="terminal", arguments='{"command": "ls"}',
    ...                 origin="completion").to_chat_dict()["function"]["name"]
    'terminal'
    """

    model_config = ConfigDict(extra="ignore")

    id: str
    responses_item_id: str | None = None
    name: str
    arguments: str
    origin: Literal["completion", "responses"] = "completion"

    @classmethod
    def from_chat_tool_call(cls, tool_call: Any) -> "MessageToolCall":
        """A call from Chat Completions' ``tool_calls`` item: an object (litellm's) or a dict.

        >>> MessageToolCall.from_chat_tool_call(
        ...     {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        ... ).name
        'ls'
        """

        def part(value: Any, key: str) -> Any:
            return value.get(key) if isinstance(value, Mapping) else getattr(value, key, None)

        function = part(tool_call, "function")
        return cls(
            id=part(tool_call, "id"),
            name=part(function, "name"),
            arguments=part(function, "arguments") or "",
            origin="completion",
        )

    def to_chat_dict(self) -> dict[str, Any]:
        """The call in OpenAI Chat Completions' ``tool_calls`` format."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class ThinkingBlock(FrozenValue):
    """An Anthropic extended-thinking block, kept to be sent back with tool results."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(FrozenValue):
    """A redacted Anthropic thinking block."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


def _thinking_type(value: Any) -> str:
    # Without "type" (it has a default), a block is redacted when it carries "data".
    if isinstance(value, dict) and value.get("type") is None:
        return "redacted_thinking" if "data" in value else "thinking"
    return _content_type(value)


ThinkingBlocks: TypeAlias = tuple[
    Annotated[
        Annotated[ThinkingBlock, Tag("thinking")]
        | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")],
        Discriminator(lambda value: _thinking_type(value)),
    ],
    ...,
]


class ReasoningItemModel(FrozenValue):
    """An OpenAI Responses reasoning item (``encrypted_content`` is never shown)."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = None
    summary: tuple[str, ...] = ()
    content: tuple[str, ...] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class Message(FrozenValue):
    """One LLM message: a role, content parts, and the tool-call threading keys.

    Fields OpenHands no longer uses (``cache_enabled``, ``vision_enabled``,
    ...) are ignored on input, as OpenHands does, so its older events load.

    >>> Message(role="assistant", content=None).content
    ()
    """

    model_config = ConfigDict(extra="ignore")

    role: Role
    content: tuple[Content, ...] = ()
    tool_calls: tuple[MessageToolCall, ...] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None
    thinking_blocks: ThinkingBlocks = ()
    responses_reasoning_item: ReasoningItemModel | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _coerce_content(cls, value: Any) -> Any:
        if value is None:
            return ()
        if isinstance(value, str):
            return (TextContent(text=value),)
        return value

    @property
    def contains_image(self) -> bool:
        """Whether any content part is an image."""
        return any(isinstance(part, ImageContent) for part in self.content)

    @property
    def text(self) -> str:
        """The text parts joined (a cowconv convenience; not in the JSON)."""
        return "".join(part.text for part in self.content if isinstance(part, TextContent))
