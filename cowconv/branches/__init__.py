"""Branch suites: run many forks of one conversation, here or on workers.

``suite`` (:func:`~cowconv.run_branches`), ``report``
(:class:`~cowconv.SuiteReport`) and ``wire`` (what travels to a worker and
back). The public names are exported by :mod:`cowconv`.
"""
