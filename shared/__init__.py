"""Corral's decision core: pure functions and models.

Imports only the standard library, pydantic and PyYAML (an import-linter contract checks it).
It decides; it never calls a cloud or Redis. Clocks and ids come in as arguments.
"""
