"""Maps the repository's top-level folders onto one import package, ``corral``.

``shared/`` becomes ``corral.shared``, ``services/`` ``corral.services`` and ``workers/``
``corral.workers``, so nothing with a generic name lands in site-packages. ``corral`` itself is
a namespace package (PEP 420): it has no ``__init__.py`` of its own.
"""

from setuptools import find_namespace_packages, setup

FOLDERS = ("shared", "services", "workers")

packages: list[str] = []
package_dir: dict[str, str] = {}
for folder in FOLDERS:
    package_dir[f"corral.{folder}"] = folder
    packages.append(f"corral.{folder}")
    # Namespace discovery, so data folders (catalog/data) are packages too and setuptools has
    # nothing ambiguous to warn about.
    subs = find_namespace_packages(where=folder, exclude=["__pycache__", "*.__pycache__"])
    packages.extend(f"corral.{folder}.{sub}" for sub in subs)

setup(packages=packages, package_dir=package_dir)
