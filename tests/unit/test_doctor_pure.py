"""The CPU levels `memory-pipelines doctor` reads from /proc/cpuinfo, and what it says of each."""

from __future__ import annotations

from memory_pipelines.doctor import FAIL, OK, WARN, X86_LEVELS, check_cpu, cpu_flags, cpu_level

V2 = set().union(X86_LEVELS[0][1], {"fpu", "sse", "sse2"})
V3 = V2 | X86_LEVELS[1][1]
ZEN2 = V3 | {"sha_ni", "clzero"}  # an AMD EPYC Rome: AVX2, no AVX-512
V4 = V3 | X86_LEVELS[2][1]


def test_levels_need_every_flag_of_their_own_and_the_lower_levels():
    assert cpu_level(set()) is None
    assert cpu_level(V2) == "x86-64-v2"
    assert cpu_level(V2 | {"avx"}) == "x86-64-v2"  # a Sandy Bridge: AVX without AVX2
    assert cpu_level(ZEN2) == "x86-64-v3"
    assert cpu_level(V4) == "x86-64-v4"
    assert cpu_level(V4 - {"popcnt"}) is None  # a hole below stops the climb


def test_an_avx2_cpu_without_avx512_is_fine_and_one_without_avx2_is_told_why(tmp_path):
    zen2 = check_cpu(ZEN2)
    assert zen2.status == OK and zen2.detail == "x86-64-v3, AVX-512 no (nothing needs it: embeddings are halfvec)"
    sandy = check_cpu(V2 | {"avx"})
    assert sandy.status == FAIL and "duckdb and the embedded server's pgvector need x86-64-v3" in sandy.detail
    assert "AVX2" in sandy.fix
    assert check_cpu(None).status == WARN
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(cpuinfo) == {"fpu", "sse2", "avx2", "avx512f"}
    assert cpu_flags(tmp_path / "absent") is None
