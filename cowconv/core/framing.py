"""Texts at the edges: framing texts are checked, texts from the outside world made representable.

Texts that end up inside a protocol's framing: one line, no control characters.

Nor whitespace at either end, which HTTP strips from a header value.

An event id is written as the ``id:`` line of a server-sent event, a
``Last-Event-ID`` header and a URL query; a line break or NUL in it would
end that line early and break every stream that reaches the event. Such
texts are checked where they enter (:func:`check_framing_text`), so no
stored value can break a stream later.

>>> check_framing_text("evt-1", "an event id")
'evt-1'
>>> check_framing_text("evt\\n1", "an event id")
Traceback (most recent call last):
...
cowconv._exceptions.InvalidValueError: an event id may not hold ... (got '\\n' at position 3)
"""

from __future__ import annotations

import re

from cowconv._exceptions import InvalidValueError

__all__ = ["check_framing_text", "representable"]

# C0 and C1 control characters (NUL, CR, LF, ...), DEL, and the Unicode line and paragraph
# separators, which some line splitters (str.splitlines, JavaScript) also break lines at.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_framing_text(text: str, what: str) -> str:
    """``text`` if it holds no control character or line break and does not start or end
    with whitespace, else :class:`~cowconv.InvalidValueError`.

    >>> check_framing_text("tab\\there", "a title")
    Traceback (most recent call last):
    ...
    cowconv._exceptions.InvalidValueError: a title may not hold ... (got '\\t' at position 3)
    """
    found = _UNSAFE.search(text)
    if found is not None:
        raise InvalidValueError(
            f"{what} may not hold control characters or line breaks "
            f"(got {found.group()!r} at position {found.start()})"
        )
    if text != text.strip():
        # HTTP drops them from a header value: a client reconnecting with the id as its
        # Last-Event-ID would name another id.
        raise InvalidValueError(f"{what} may not start or end with whitespace, got {text!r}")
    return text


def representable(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (text from the outside world).

    A model's answer or a command's output is data: what UTF-8 cannot hold
    is recorded as the replacement character, never refused. Surrogate
    pairs written as two code points are joined.

    >>> representable("ok \\ud800!"), representable("\\ud83d\\ude00") == "\\U0001f600"
    ('ok \ufffd!', True)
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text
