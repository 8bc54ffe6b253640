"""Where a conversation's snapshots live: this process (``local``) or an agent server (``remote``).

Each implements :class:`~cowconv.Backend` (see :mod:`cowconv.ports`) over the
core and the agent runtime; a :class:`~cowconv.Conversation` picks one.
"""
