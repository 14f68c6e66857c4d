"""The simulator: a day of requests replayed through Corral's own decision code (the planner,
failover steps, blocked-scope memory, pool passes, the autoscaler) against a simulated clock
and cloud, next to the policies it is compared with. Pure: standard library, pydantic, YAML.

- :mod:`.scenario` and :mod:`.workload`: the user's files (and a seeded generator);
- :mod:`.cloud`: capacity, reservations, outages, API errors, spot preemptions, the bill;
- :mod:`.engine`: the clock, each request's work, and what is measured (:mod:`.metrics`);
- :mod:`.corral` (with :mod:`.direct`, :mod:`.pools`, :mod:`.ray`): Corral as configured;
- :mod:`.peers`: greedy (SkyPilot-like), static (Determined-like) and the oracle;
- :mod:`.run`: every policy over the same day.
"""
