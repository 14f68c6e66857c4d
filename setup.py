"""Maps the repository's top-level folders onto one import package, ``corral``.

``shared/`` becomes ``corral.shared``, ``services/`` ``corral.services`` and ``workers/``
``corral.workers``, so nothing with a generic name lands in site-packages. ``corral`` itself is
a namespace package (PEP 420): it has no ``__init__.py`` of its own.
"""

from setuptools import find_packages, setup

FOLDERS = ("shared", "services", "workers")

packages: list[str] = []
package_dir: dict[str, str] = {}
for folder in FOLDERS:
    package_dir[f"corral.{folder}"] = folder
    packages.append(f"corral.{folder}")
    packages.extend(f"corral.{folder}.{sub}" for sub in find_packages(where=folder))

setup(packages=packages, package_dir=package_dir)
