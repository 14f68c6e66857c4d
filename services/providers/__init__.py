"""Providers: one package per cloud (aws, gcp, local), each with the same file names.

The port is :class:`corral.services.providers.base.Provider`; ``get_provider(name)`` imports a
provider lazily, so a cloud SDK is loaded only by the workers that use it.
"""
