"""``analysis profile`` when several programs share a module name (two ``jax.jit(lambda ...)``
are both ``jit__lambda``): each program's ops are joined to its own HLO by program id, and
the HLO's source line says how the modules were told apart; without ids the last module of
the name is used, and that is said too."""

from __future__ import annotations

import pandas as pd
from tpu_trace import TPU_HLO as _TPU_HLO
from tpu_trace import tpu_xplane as _tpu_xplane

from analysis.profiling.profile_load import _by_module, _split_programs, analyse, load_hlo

WITH_COLLECTIVES = _TPU_HLO[_TPU_HLO.index("HloModule jit_step") :]
# same name, same instruction names, no collective: only the program id tells them apart
WITHOUT = _TPU_HLO[: _TPU_HLO.index("HloModule jit_step")].replace("HloModule jit_other", "HloModule jit_step")


def test_modules_of_one_name_are_kept_apart_by_program_id_and_the_newest_answers_to_the_name():
    notes: list[str] = []
    texts = _by_module([("jit_step(18)", WITH_COLLECTIVES), ("jit_step(19)", WITHOUT)], notes)
    assert texts == {"jit_step(18)": WITH_COLLECTIVES, "jit_step(19)": WITHOUT, "jit_step": WITHOUT}
    assert notes == ["2 modules named jit_step: told apart by program id (jit_step(18), jit_step(19))"]


def test_without_program_ids_the_last_module_of_a_name_is_used_and_said(tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "module_0003.jit_step.sm_8.0_gpu_after_optimizations.txt").write_text(WITHOUT)
    (dump / "module_0012.jit_step.sm_8.0_gpu_after_optimizations.txt").write_text(WITH_COLLECTIVES)
    texts, source = load_hlo(str(dump), [])
    assert texts == {"jit_step": WITH_COLLECTIVES}
    assert source == (
        f"{dump} (--xla_dump_to); 2 modules named jit_step: the last "
        "(module_0012.jit_step.sm_8.0_gpu_after_optimizations.txt) is used"
    )


def test_ops_take_the_key_of_their_own_program():
    ops = pd.DataFrame(
        {"hlo_module": ["jit_step", "jit_step", "jit_other", "jit_step"], "program_id": ["18", "19", "5", None]}
    )
    texts = {"jit_step(18)": "", "jit_step(19)": "", "jit_step": "", "jit_other": ""}
    assert _split_programs(ops, texts)["hlo_module"].tolist() == [
        "jit_step(18)",
        "jit_step(19)",
        "jit_other",
        "jit_step",
    ]


def test_a_trace_of_the_older_program_is_profiled_with_its_own_hlo_not_the_newest(tmp_path):
    """Program 18 ran (its trace); program 19, newer and of the same name, holds no
    collective: taking the newest (as before) found no collective to profile."""
    ops = [
        ("%fusion.1 = f32[1024]{0} fusion(f32[1024]{0} %p.1), kind=kLoop", "fusion.1", "loop fusion", 0, 100),
        ("%all-reduce.5 = f32[1024]{0} all-reduce(f32[1024]{0} %fusion.1)", "all-reduce.5", "all-reduce", 100, 200),
    ]
    trace = tmp_path / "tpu.xplane.pb"
    trace.write_bytes(_tpu_xplane(4, 2, ops, program=18))
    notes: list[str] = []
    texts = _by_module([("jit_step(18)", WITH_COLLECTIVES), ("jit_step(19)", WITHOUT)], notes)
    prof = analyse([trace], texts)
    table = prof.table.set_index("name")
    assert sorted(table.index) == ["all-gather-start.2", "all-reduce.5"]  # program 18's collectives
    assert set(table["hlo_module"]) == {"jit_step(18)"}
    assert table.loc["all-reduce.5", "executions"] == 8  # 4 devices x 2 steps
