"""What runs an agent over the core: messages for the model, tools, condensing, the run loop.

Imports only :mod:`cowconv.core` (and :mod:`cowconv._exceptions`). The
public names are exported by :mod:`cowconv`.
"""
