"""Metrics and logs: what operators watch Corral by.

- :mod:`.events`: counters and histograms of things that happen (an attempt ends, a request
  gets capacity), counted where the store writes them, so each counts once however many times
  a task is delivered.
- :mod:`.state_metrics`: gauges computed at scrape time from Redis (requests, instances, cost,
  queues, blocked scopes, pools, beat), right however many processes write.
- :mod:`.exposition`: the registries the API and the workers serve, and Prometheus's
  multiprocess mode for prefork workers.
- :mod:`.logs`: JSON logs (``CORRAL_LOG_FORMAT=json``) with the request id of the work at hand.
- :mod:`.worker_hooks`: the Celery worker signals that tie these into every worker process.
"""
