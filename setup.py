"""setuptools' package list, found rather than listed by hand: every package under
mpievo/, and the top-level kernels/ directory (with any subpackage it gains) installed
as mpievo.kernels. Metadata, dependencies and package data are in pyproject.toml;
tests/wheel/check.sh builds and installs a wheel and imports every module from it."""

from setuptools import find_packages, setup

KERNELS = "mpievo.kernels"
packages = find_packages(include=["mpievo", "mpievo.*"])
packages += [KERNELS, *(f"{KERNELS}.{name}" for name in find_packages("kernels"))]
setup(packages=packages, package_dir={KERNELS: "kernels"})
