"""The core: immutable values a conversation is made of, and the pure changes between them.

Events, their history (a persistent vector), the conversation tree, the
agent's configuration and the snapshot (:class:`~cowconv.ConversationState`)
that holds them, and the named changes from one snapshot to the next. It
imports nothing of cowconv but :mod:`cowconv._exceptions`: every other layer
builds on it. The public names are exported by :mod:`cowconv`.
"""
