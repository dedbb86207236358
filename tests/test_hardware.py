"""The precision rule (``agentgym_turn.hardware``): bf16 on a CPU only with native bf16 instructions and a probe that
finds it faster; a tie goes to fp32; the verdict is cached per host. Flags and probe timings are faked here; the
real probe runs once at the end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentgym_turn import hardware as H
from agentgym_turn.error import InvalidArgument

#: /proc/cpuinfo flag lines of the three host kinds this project has run on (abridged to what matters)
EPYC_BF16 = "fpu sse2 avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni"
EPYC_AVX2 = "fpu sse2 avx2 fma"
XEON_AVX512 = "fpu sse2 avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni"  # oneDNN emulates bf16 here
XEON_AMX = "fpu avx2 avx512f avx512bw avx512vl amx_tile amx_bf16 amx_int8"


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t: x\n")
    return path


def test_flags_and_model_are_read_from_the_first_cpu(tmp_path):
    path = _cpuinfo(tmp_path, EPYC_BF16)
    assert "avx512_bf16" in H.cpu_flags(path) and "x" not in H.cpu_flags(path)
    assert H.cpu_model(path) == "Test CPU"
    assert H.cpu_flags(tmp_path / "missing") == frozenset()  # no /proc (macOS): no flags, fp32


@pytest.mark.parametrize(
    ("flags", "probe", "bf16", "probed"),
    [
        (EPYC_AVX2, None, False, False),  # no bf16 instructions: fp32 without a probe
        (XEON_AVX512, None, False, False),  # torch's mkldnn flag says yes here; emulated bf16 is ~4x slower
        (EPYC_BF16, H.ProbeResult(85.0, 210.0), True, True),  # native and measured faster
        (XEON_AMX, H.ProbeResult(80.0, 400.0), True, True),
        (EPYC_BF16, H.ProbeResult(85.0, 19.8), False, True),  # flags say yes, the probe says no
        (EPYC_BF16, H.ProbeResult(85.0, 85.0), False, True),  # a tie goes to fp32
        (EPYC_BF16, H.ProbeResult(85.0, 85.0 * H.BF16_MARGIN * 0.99), False, True),  # within the margin: fp32
        (EPYC_BF16, H.ProbeResult(85.0, 85.0 * H.BF16_MARGIN), True, True),
    ],
)
def test_bf16_only_with_native_instructions_and_a_probe_that_finds_it_faster(flags, probe, bf16, probed):
    calls = []

    def fake_probe():
        calls.append(1)
        return probe

    decision = H.cpu_bf16_decision(flags.split(), fake_probe)
    assert decision.bf16 is bf16
    assert bool(calls) is probed and decision.probe == probe
    assert ("bf16" if bf16 else "fp32") in decision.reason.rsplit(":", 1)[-1]


def test_the_probe_is_timed_from_the_clock(monkeypatch):
    """Faked clock: every fp32 matmul takes 10 ms and every bf16 one 4 ms, so bf16 is 2.5x faster."""
    import torch

    durations = {torch.float32: 0.010, torch.bfloat16: 0.004}
    now = [0.0]
    real_mm = torch.mm

    def timed_mm(a, b):
        now[0] += durations[a.dtype]
        return real_mm(a, b)

    monkeypatch.setattr(torch, "mm", timed_mm)
    monkeypatch.setattr(H.time, "perf_counter", lambda: now[0])
    result = H.probe_matmul(repeats=2, shape=(8, 8, 8))
    assert result.fp32_gflops == pytest.approx(2 * 8**3 / 0.010 / 1e9, rel=1e-2)
    assert result.ratio == pytest.approx(2.5, rel=1e-2)
    assert torch.get_num_threads() >= 1  # restored


def test_the_verdict_is_cached_per_host_and_a_broken_cache_costs_a_probe(tmp_path):
    calls = []

    def probe():
        calls.append(1)
        return H.ProbeResult(80.0, 200.0)

    flags = frozenset(EPYC_BF16.split())
    first = H.cached_cpu_decision(tmp_path, flags, probe)
    second = H.cached_cpu_decision(tmp_path, flags, probe)
    assert first == second and first.bf16 and len(calls) == 1
    (saved,) = tmp_path.glob("bf16-probe-*.json")
    assert json.loads(saved.read_text())["probe"] == {"fp32_gflops": 80.0, "bf16_gflops": 200.0}
    other = H.cached_cpu_decision(tmp_path, frozenset(EPYC_AVX2.split()), probe)  # another host: its own verdict
    assert not other.bf16 and len(calls) == 1 and len(list(tmp_path.glob("bf16-probe-*.json"))) == 2
    saved.write_text("{not json")
    assert H.cached_cpu_decision(tmp_path, flags, probe) == first and len(calls) == 2
    unwritable = tmp_path / "file"
    unwritable.write_text("")
    assert H.cached_cpu_decision(unwritable / "sub", flags, probe).bf16  # cannot write: decides anyway


def test_the_environment_overrides_the_cpu_rule(monkeypatch):
    import torch

    for value, expected in (("0", False), ("1", True)):
        monkeypatch.setenv("TURNRL_BF16", value)
        H._cpu_bf16.cache_clear()
        assert H.native_bf16("cpu") is expected
        if not torch.cuda.is_available():
            assert H.native_dtype() == ("bfloat16" if expected else "float32")
    monkeypatch.setenv("TURNRL_BF16", "yes")
    H._cpu_bf16.cache_clear()
    with pytest.raises(InvalidArgument, match=r"TURNRL_BF16='yes'.*use 1.*0"):
        H.native_bf16("cpu")
    monkeypatch.delenv("TURNRL_BF16")
    H._cpu_bf16.cache_clear()


def test_this_host_decides_by_its_flags_and_a_real_probe(tmp_path):
    """No bf16 instruction among this CPU's flags: fp32; with one, the real probe decides (and says so)."""
    flags = H.cpu_flags()
    decision = H.cached_cpu_decision(tmp_path, flags)
    if not set(H.BF16_CPU_FLAGS) & flags:
        assert not decision.bf16 and decision.probe is None
    else:
        assert decision.probe is not None and decision.probe.fp32_gflops > 0 and decision.probe.bf16_gflops > 0
        assert decision.bf16 is (decision.probe.ratio >= H.BF16_MARGIN)


def test_vllm_gets_every_allowed_cpu_unless_the_environment_chose():
    here = H.vllm_cpu_threads({})
    assert here == {
        "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, sorted(os.sched_getaffinity(0)))),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }
    assert H.vllm_cpu_threads({}, cpus=[5, 2]) == {
        "VLLM_CPU_OMP_THREADS_BIND": "2,5",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }
    for name, value in [("VLLM_CPU_OMP_THREADS_BIND", "auto"), ("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")]:
        assert H.vllm_cpu_threads({name: value}) == {}  # a user's (or a caller's) choice stands, both variables
    assert H.vllm_cpu_threads({"VLLM_CPU_OMP_THREADS_BIND": ""}) == here  # set but empty: vLLM reads its default


def test_a_served_model_gets_the_cpus_and_keeps_a_users_binding(monkeypatch):
    from agentgym_turn.serve import server_command

    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    _, env = server_command("smollm2", port=8123)
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0" and env["VLLM_CPU_OMP_THREADS_BIND"]
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    _, env = server_command("smollm2", port=8123)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and "VLLM_CPU_NUM_OF_RESERVED_CPU" not in env
