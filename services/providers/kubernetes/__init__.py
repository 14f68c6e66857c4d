"""Kubernetes as a cloud: a machine is a pod (see ``provider.py`` and ``pods.py``)."""
