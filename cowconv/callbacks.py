"""Conversation callbacks: OpenHands' SDK's callback type, and async callbacks run on a loop.

A conversation calls its callbacks with each event it records, in order,
from the thread that recorded it. :class:`AsyncCallbackWrapper` (OpenHands'
``openhands.sdk.utils.async_utils.AsyncCallbackWrapper``) lets an
``async def`` callback run on an event loop of your own (in another thread)
instead.

>>> import asyncio, threading
>>> from cowconv import MessageEvent
>>> seen = []
>>> async def remember(event):
...     seen.append(event.text)
>>> loop = asyncio.new_event_loop()
>>> thread = threading.Thread(target=loop.run_forever, daemon=True)
>>> thread.start()
>>> callback = AsyncCallbackWrapper(remember, loop)
>>> callback(MessageEvent(role="user", content="hi"))
>>> callback.wait_for_pending(timeout=30)
>>> seen
['hi']
>>> _ = loop.call_soon_threadsafe(loop.stop); thread.join(); loop.close()
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeAlias

from cowconv.core.events import Event
from cowconv.ports import EventCallback

__all__ = ["AsyncCallbackWrapper", "AsyncConversationCallback", "ConversationCallbackType"]

ConversationCallbackType: TypeAlias = EventCallback
"""OpenHands' SDK's name for a conversation callback: called with each event, returns nothing."""

AsyncConversationCallback: TypeAlias = Callable[[Event], Coroutine[Any, Any, None]]
"""An ``async def`` callback taking each event."""


class AsyncCallbackWrapper:
    """A synchronous callback that runs ``async_callback(event)`` on ``loop`` (another thread).

    Each call schedules the coroutine on ``loop`` when the loop is running
    (events that arrive while it is not are dropped, as in OpenHands' SDK)
    and returns at once; :meth:`wait_for_pending` waits for the scheduled
    ones. An exception a callback raises stays in its future (it does not
    reach the conversation).

    >>> loop = asyncio.new_event_loop()
    >>> async def ignore(event):
    ...     pass
    >>> AsyncCallbackWrapper(ignore, loop)(None)  # the loop is not running: nothing scheduled
    >>> loop.close()
    """

    def __init__(
        self, async_callback: AsyncConversationCallback, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.async_callback = async_callback
        self.loop = loop
        self._pending_futures: list[Future[None]] = []
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        """Schedule the callback with ``event`` on the loop, if the loop is running."""
        if not self.loop.is_running():
            return
        future = asyncio.run_coroutine_threadsafe(self.async_callback(event), self.loop)
        with self._lock:
            # Finished ones are dropped, so a long conversation keeps few futures.
            self._pending_futures = [f for f in self._pending_futures if not f.done()]
            self._pending_futures.append(future)

    def wait_for_pending(self, timeout: float | None = None) -> None:
        """Wait until every scheduled callback has finished (each up to ``timeout`` seconds).

        Raises :class:`TimeoutError` when one is still running after ``timeout``.
        """
        with self._lock:
            futures = list(self._pending_futures)
        for future in futures:
            try:
                future.result(timeout=timeout)
            except TimeoutError:
                raise
            except Exception:  # a callback's own error stays in its future, not ours
                pass
