"""The runtime's steps, each a plain function over explicit dependencies.

Celery tasks in workers/ are thin wrappers around these; the API calls the same functions, so
there is one implementation of every step, whoever runs it.
"""
