"""Build step: ship the top-level workloads/, topologies/ and sweeps/ inside the package.

The project keeps those folders at the repository root (where users and docs
point). A wheel or ``pip install .`` copies their YAML files to
``simulator/shipped/<folder>/`` in the build, where
:func:`simulator.config.loader.shipped_dirs` finds them. Everything else about
the package is declared in pyproject.toml. An editable install needs no copy:
the loader reads the folders in the checkout.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("workloads", "topologies", "sweeps", "stacks")
ROOT = Path(__file__).resolve().parent


class BuildWithShippedData(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        for folder in SHIPPED:
            target = Path(self.build_lib, "simulator", "shipped", folder)
            self.mkpath(str(target))
            for src in sorted((ROOT / folder).glob("*.yaml")):
                self.copy_file(str(src), str(target / src.name))


setup(cmdclass={"build_py": BuildWithShippedData})
