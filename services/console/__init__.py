"""The web console: server-rendered pages under ``/console``, served by the API behind its
token (services/console/routes.py). Nothing to build: plain HTML from Python strings."""
