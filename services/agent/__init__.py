"""The node agent: one per machine, it runs the machine's work and reports it.

:mod:`.core` is the agent itself; :mod:`.node` is how a cloud machine's agent reaches Corral
(its HTTP API, with a per-node token). Standard library only, so a bare VM runs it after
``pip install --no-deps``.
"""
