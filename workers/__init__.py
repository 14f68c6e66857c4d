"""Celery apps and tasks only: thin, named, idempotent adapters over ``corral.services``."""
