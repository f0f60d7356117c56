"""requirements.txt and pyproject.toml install exactly one ONNX Runtime package on every platform."""

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker

ROOT = Path(__file__).resolve().parents[2]
PLATFORMS = [("linux", "x86_64"), ("win32", "AMD64"), ("darwin", "arm64"), ("darwin", "x86_64"), ("linux", "aarch64")]
GPU_WHEEL = {("linux", "x86_64"), ("win32", "AMD64")}


def ort_lines(lines):
    return [line for line in lines if re.match(r"onnxruntime(-gpu)?==", line)]


def requirement_sets():
    req = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {"requirements.txt": ort_lines(req), "pyproject.toml": ort_lines(project)}


@pytest.mark.parametrize("source", ["requirements.txt", "pyproject.toml"])
@pytest.mark.parametrize("platform", PLATFORMS)
def test_exactly_one_onnxruntime_package_per_platform(source, platform):
    env = {"sys_platform": platform[0], "platform_machine": platform[1]}
    chosen = [line.split(";")[0].split("==")[0] for line in requirement_sets()[source]
              if Marker(line.split(";", 1)[1]).evaluate(env)]
    assert chosen == (["onnxruntime-gpu"] if platform in GPU_WHEEL else ["onnxruntime"])


def test_the_openvino_extra_and_the_test_environment_pin_the_same_wheel():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["openvino"]
    dev = [line.strip() for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
           if line.startswith("openvino")]
    assert extra == dev and len(dev) == 1 and "==" in dev[0]


def pins(name):
    lines = [line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines()]
    return [line for line in lines if line]


def test_the_cpu_only_requirements_swap_only_the_onnxruntime_wheel():
    default, cpu = pins("requirements.txt"), pins("requirements-cpu.txt")
    gpu_pin = next(line.split(";")[0].strip() for line in default if line.startswith("onnxruntime-gpu=="))
    assert "onnxruntime==" + gpu_pin.split("==")[1] in cpu
    assert not [line for line in cpu if line.startswith("onnxruntime-gpu")]
    # The project line would pull the GPU wheel back in through pyproject.toml: the README installs it with --no-deps.
    assert not [line for line in cpu if line.startswith("-e") or line == "."]
    rest = {line for line in default if not line.startswith(("onnxruntime", "-e"))}
    assert rest == {line for line in cpu if not line.startswith("onnxruntime")}


def test_the_readme_and_the_test_script_use_the_cpu_only_install_as_documented():
    readme = (ROOT / "README.md").read_text()
    assert "pip install -r requirements-cpu.txt && pip install --no-deps -e ." in readme
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert "-r requirements-cpu.txt" in script and "pip uninstall -q -y onnxruntime-gpu" in script
