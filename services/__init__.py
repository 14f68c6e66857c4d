"""Adapters that carry the core's decisions out: providers, Redis store, HTTP API, CLI.

Never imports ``corral.workers``: work is published by task name through the dispatcher.
"""
