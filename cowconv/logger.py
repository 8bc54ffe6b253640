"""Logging as OpenHands' SDK sets it up: import this module and the root is configured.

Importing :mod:`cowconv.logger` (or using ``cowconv.get_logger``) calls
:func:`setup_logging` once with the environment's settings, unless
``LOG_AUTO_CONFIG`` is false, so ``get_logger(__name__).info(...)`` prints
as it does with OpenHands' SDK. ``import cowconv`` alone configures nothing.
The functions and constants live in :mod:`cowconv.core.logger`, where every
layer of cowconv can import them.

>>> from cowconv.logger import get_logger
>>> get_logger(__name__).name
'cowconv.logger'
"""

from __future__ import annotations

import os

from cowconv.core.logger import (
    DEBUG,
    ENV_JSON,
    ENV_LOG_DIR,
    ENV_LOG_LEVEL,
    IN_CI,
    JsonLogFormatter,
    get_logger,
    rolling_log_view,
    setup_logging,
)

__all__ = [
    "DEBUG",
    "ENV_JSON",
    "ENV_LOG_DIR",
    "ENV_LOG_LEVEL",
    "IN_CI",
    "JsonLogFormatter",
    "get_logger",
    "rolling_log_view",
    "setup_logging",
]

if os.environ.get("LOG_AUTO_CONFIG", "true").lower() in {"1", "true", "yes"}:
    setup_logging()
