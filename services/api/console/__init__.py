"""The web console: server-rendered pages under ``/console``, served by the API behind its
token (services/api/console/routes.py). Nothing to build: plain HTML from Python strings."""
