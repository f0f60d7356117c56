"""CPU feature detection from /proc/cpuinfo texts, and the int8 defaults that follow."""

from __future__ import annotations

from ortlab.settings.config import QuantType, Target
from ortlab.runtime.hardware import TWO_GB, advise, detect, external_data_note, parse_cpuinfo

X86_VNNI = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
flags\t\t: fpu vme sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma avx512f avx512dq avx512bw avx512vl avx512_vnni
"""
X86_AVX2 = """processor\t: 0
model name\t: Intel(R) Core(TM) i7-6700 CPU @ 3.40GHz
flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma
"""
X86_AVX_VNNI = "model name\t: 12th Gen Intel(R) Core(TM) i7-1260P\nflags\t\t: sse2 avx avx2 avx_vnni\n"
ARM_DOT = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp i8mm
CPU implementer\t: 0x41
"""
ARM_PLAIN = "processor\t: 0\nFeatures\t: fp asimd evtstrm crc32 cpuid\n"


def test_x86_with_vnni_gets_u8s8_at_full_range():
    f = parse_cpuinfo(X86_VNNI)
    assert (f.arch, f.avx2, f.avx512, f.vnni, f.int8_dot_product) == ("x86", True, True, True, True)
    assert "Xeon" in f.model_name and "VNNI" in f.summary()
    a = advise(f)
    assert (a.activation_type, a.weight_type, a.reduce_range) == (QuantType.UINT8, QuantType.INT8, False)
    assert parse_cpuinfo(X86_AVX_VNNI).vnni


def test_x86_without_vnni_reduces_range():
    f = parse_cpuinfo(X86_AVX2)
    assert (f.arch, f.avx2, f.avx512, f.vnni, f.int8_dot_product) == ("x86", True, False, False, False)
    a = advise(f)
    assert a.activation_type == QuantType.UINT8 and a.reduce_range
    assert "reduce-range" in " ".join(a.notes)
    assert a.quant_overrides()["reduce_range"] is True


def test_arm_gets_s8s8_and_dotprod_is_read():
    f = parse_cpuinfo(ARM_DOT)
    assert (f.arch, f.dotprod, f.i8mm, f.int8_dot_product) == ("arm", True, True, True)
    assert advise(f).activation_type == QuantType.INT8
    plain = parse_cpuinfo(ARM_PLAIN)
    assert plain.arch == "arm" and not plain.dotprod
    assert "no dot-product" in " ".join(advise(plain).notes)


def test_gpu_target_is_s8s8_and_unknown_text_uses_the_machine():
    assert advise(parse_cpuinfo(X86_VNNI), Target.GPU).activation_type == QuantType.INT8
    f = parse_cpuinfo("", machine="aarch64")
    assert f.arch == "arm" and f.source == "unknown"
    assert parse_cpuinfo("", machine="x86_64").arch == "x86"
    assert not advise(parse_cpuinfo("", machine="x86_64")).reduce_range  # unknown: no guess


def test_external_data_note_and_detect():
    assert external_data_note(100) is None and external_data_note(None) is None
    assert "external data" in (external_data_note(TWO_GB + 1) or "")
    assert any("2 GB" in n for n in advise(parse_cpuinfo(X86_VNNI), model_bytes=3 * 1024**3).notes)
    assert detect().arch in ("x86", "arm", "other")


X86_AMX = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8 avx_vnni
"""


def test_amx_and_bf16_are_listed_where_cpuinfo_has_them():

    f = parse_cpuinfo(X86_AMX)
    assert (f.amx_tile, f.amx_bf16, f.amx_int8, f.avx512_bf16) == (True, True, True, True)
    assert f.summary() == ("x86 (Intel(R) Xeon(R) Platinum 8488C) · AVX2, AVX-512, VNNI, AVX-512 BF16, "
                           "AMX (tile, bf16, int8) · int8 dot product")
    plain = parse_cpuinfo(X86_VNNI)
    assert not (plain.amx_tile or plain.amx_bf16 or plain.amx_int8 or plain.avx512_bf16)
    assert "AMX" not in plain.summary() and "BF16" not in plain.summary()
    only_tile = parse_cpuinfo("flags : sse2 avx2 amx_tile\n")
    assert "AMX (tile)" in only_tile.summary()


def test_inspect_prints_amx_from_a_fake_cpuinfo(monkeypatch, capsys):
    import ortlab.runtime.hardware as hw
    from ortlab.cli.main import main
    from ortlab.data.samples import get_sample

    monkeypatch.setattr(hw, "detect", lambda: parse_cpuinfo(X86_AMX))
    import ortlab.api as api

    monkeypatch.setattr(api.machine, "detect_hardware", hw.detect)
    assert main(["inspect", str(get_sample("digits_cnn").model_path)]) == 0
    assert "AMX (tile, bf16, int8)" in capsys.readouterr().out


def test_the_default_recipe_follows_the_cpus_advice_except_where_a_person_chose():
    from ortlab.runtime.hardware import advised_recipe
    from ortlab.settings.config import Precision, QuantConfig, QuantMode, Recipe

    int8 = Recipe(precision=Precision.INT8)
    avx2, vnni, arm = parse_cpuinfo(X86_AVX2), parse_cpuinfo(X86_VNNI), parse_cpuinfo(ARM_DOT)
    assert advised_recipe(int8, avx2).quant.reduce_range is True
    assert advised_recipe(int8, vnni) == int8  # U8S8 at full range: the class default
    assert advised_recipe(int8, arm).quant.activation_type == QuantType.INT8  # S8S8
    dynamic = Recipe(precision=Precision.INT8, quant=QuantConfig(mode=QuantMode.DYNAMIC))
    assert advised_recipe(dynamic, avx2).quant.reduce_range is True  # MatMulInteger multiplies U8S8 too
    assert advised_recipe(dynamic, arm).quant.activation_type == QuantType.UINT8  # not a dynamic setting
    # what a person gave stays: full range, or U8U8 (no 16-bit saturation, so no reduce-range)
    assert advised_recipe(int8, avx2, given={"quant.reduce_range"}).quant.reduce_range is False
    u8u8 = Recipe(precision=Precision.INT8, quant=QuantConfig(weight_type=QuantType.UINT8))
    assert advised_recipe(u8u8, avx2, given={"quant.weight_type"}) == u8u8
    gpu = Recipe(precision=Precision.INT8, target=Target.GPU)
    assert advised_recipe(gpu, avx2) == gpu


def test_the_cli_default_int8_recipe_follows_this_cpu_and_its_line_says_so():
    import shlex

    from ortlab.cli import main as cli, optimize
    from ortlab.settings.config import recipe_cli_line

    def parse(*flags: str):
        return optimize.recipe_from_args(cli.build_parser().parse_args(["optimize", "m.onnx", "out", *flags]))

    recipe = parse("--precision", "int8")
    assert recipe.quant.reduce_range is advise().reduce_range
    assert parse("--precision", "int8", "--no-reduce-range").quant.reduce_range is False
    assert parse("--precision", "int8", "--reduce-range").quant.reduce_range is True
    assert parse("--precision", "fp32").quant.reduce_range is False
    # its line says the choice, so it rebuilds the same recipe on any CPU
    line = recipe_cli_line(recipe)
    assert ("--reduce-range" if recipe.quant.reduce_range else "--no-reduce-range") in shlex.split(line)


def test_a_run_notes_reduce_range_and_warns_of_full_range_u8s8_on_x86_without_vnni():
    from ortlab.runtime.hardware import cpu_int8
    from ortlab.runs.prepare import validate_recipe
    from ortlab.settings.config import Precision, QuantConfig, Recipe

    avx2, vnni = cpu_int8(parse_cpuinfo(X86_AVX2)), cpu_int8(parse_cpuinfo(X86_VNNI))

    def said(recipe, cpu):
        found = [f for f in validate_recipe(recipe, cpu=cpu) if f.field == "quant.reduce_range"]
        return [f.message for f in found if f.level == "warning"], [f.message for f in found if f.level == "note"]

    full = Recipe(precision=Precision.INT8)
    reduced = Recipe(precision=Precision.INT8, quant=QuantConfig(reduce_range=True))
    warnings, notes = said(full, avx2)
    assert not notes and len(warnings) == 1 and "saturate" in warnings[0] and "i7-6700" in warnings[0]
    warnings, notes = said(reduced, avx2)
    assert not warnings and len(notes) == 1 and "Reduce-range" in notes[0]
    assert said(full, vnni) == ([], []) == said(reduced, vnni)
    assert said(full, None) == ([], [])  # the CPU not considered
    assert said(Recipe(), avx2) == ([], [])  # fp32
    assert said(Recipe(precision=Precision.INT8, quant=QuantConfig(weight_type=QuantType.UINT8)),
                avx2) == ([], [])  # U8U8 does not saturate


def test_ortlab_cpu_makes_ortlab_plan_for_another_kind_of_cpu_while_timings_name_this_one(monkeypatch, capsys):
    """$ORTLAB_CPU (a named kind, or cpuinfo flags) is what the defaults, the bf16 row and inspect follow; the
    machine a timing records stays the real one."""
    from ortlab.cli.main import main
    from ortlab.data.samples import get_sample
    from ortlab.runtime import hardware as hw, openvino
    from ortlab.runtime.machine import this_machine

    real = hw.real_cpu()
    for kind, vnni, bf16, amx in [("avx2", False, False, False), ("avx512-vnni", True, False, False),
                                  ("avx512-vnni-bf16", True, True, False), ("amx", True, True, True)]:
        monkeypatch.setenv(hw.CPU_VAR, kind)
        f = detect()
        assert (f.arch, f.avx2, f.vnni, openvino.bf16_supported(f), f.amx_tile) == ("x86", True, vnni, bf16, amx)
        assert f.model_name == real.model_name and f.source == f"$ORTLAB_CPU={kind}"
        assert f.summary().endswith(f"(as set by $ORTLAB_CPU={kind})")
        assert advise().reduce_range is (not vnni)  # U8S8: 7-bit weights only without VNNI
        assert this_machine().isa == this_machine.__globals__["_isa"](real)  # timings: the real CPU
    monkeypatch.setenv(hw.CPU_VAR, "avx2, avx_vnni")
    assert detect().vnni and not detect().avx512 and detect().source == "$ORTLAB_CPU=avx2,avx_vnni"
    monkeypatch.setenv(hw.CPU_VAR, "avx2")
    assert main(["inspect", str(get_sample("digits_cnn").model_path)]) == 0
    assert "(as set by $ORTLAB_CPU=avx2)" in capsys.readouterr().out
    monkeypatch.delenv(hw.CPU_VAR)
    assert detect() == real
