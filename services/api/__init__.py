"""Corral's HTTP API (FastAPI): ``create_app(settings)``."""

from corral.services.api.app import create_app

__all__ = ["create_app"]
