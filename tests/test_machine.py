"""satseq/utils/machine.py: the processor named in cache keys and in every benchmark's record."""
from satseq.utils import machine

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse avx avx2 fma avx512f avx512_bf16
processor\t: 1
model name\t: another name that is not read
flags\t\t: fpu amx_tile
"""


class _Proc:
    def __init__(self, text):
        self.text = text

    def __call__(self, path):
        return self

    def read_text(self):
        if self.text is None:
            raise OSError("no /proc here")
        return self.text


def test_the_first_processor_its_family_and_its_speed_flags_are_named(monkeypatch):
    monkeypatch.setattr(machine, "Path", _Proc(CPUINFO))
    monkeypatch.setattr(machine.os, "cpu_count", lambda: 2)
    assert machine.cpu_info()["flags"] == ["avx2", "avx512f", "avx512_bf16"]
    assert machine.cpu_name() == "AMD EPYC 7B13 (family 25 model 1), 2 cores, avx2 avx512f avx512_bf16"
    assert machine.cpu_key() == "AMD EPYC 7B13 [avx2 avx512f avx512_bf16]"


def test_without_proc_cpuinfo_the_platform_names_it(monkeypatch):
    monkeypatch.setattr(machine, "Path", _Proc(None))
    monkeypatch.setattr(machine.platform, "processor", lambda: "arm")
    assert machine.cpu_info() == {}
    assert machine.cpu_key() == "arm"
    assert machine.cpu_name().startswith("arm, ") and machine.cpu_name().endswith("no AVX2")
