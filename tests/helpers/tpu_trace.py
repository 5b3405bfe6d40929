"""A TPU trace as TPUs write it, byte by byte, and the HLO of its two modules: the profile's
tests (tests/analysis/profiling/test_profile.py, test_profile_load.py) read both."""

from __future__ import annotations

from xspace_bytes import field as _f

_STAT_IDS = {"device_offset_ps": 1, "device_duration_ps": 2, "program_id": 3, "hlo_category": 4}


def tpu_xplane(devices: int, steps: int, ops: list[tuple], program: int = 77) -> bytes:
    """An XSpace in the real TPU encoding: per device a plane ``/device:TPU:N`` with an ``XLA
    Modules`` line (``jit_step(77)`` per step) and an ``XLA Ops`` line whose events' metadata
    name is the instruction text, ``display_name`` the instruction name, ``program_id`` and
    ``hlo_category`` stats on the metadata, and ``device_offset_ps`` / ``device_duration_ps``
    on the events (ops: ``(text, name, category, start_ns, duration_ns)``, per step 10 us apart)."""

    def stat(key: str, value) -> bytes:
        return _f(1, _STAT_IDS[key]) + (_f(3, value) if isinstance(value, int) else _f(5, value))

    def event(mid: int, start_ns: int, dur_ns: int) -> bytes:
        stats = _f(4, stat("device_offset_ps", start_ns * 1000)) + _f(4, stat("device_duration_ps", dur_ns * 1000))
        return _f(1, mid) + _f(2, start_ns * 1000 + 7) + _f(3, dur_ns * 1000 + 3) + stats  # own timespan off by ps

    metadata = _f(4, _f(1, 1) + _f(2, _f(1, 1) + _f(2, f"jit_step({program})")))
    for i, (text, name, category, _, _) in enumerate(ops, start=2):
        meta = (
            _f(1, i)
            + _f(2, text)
            + _f(4, name)
            + _f(5, stat("program_id", program))
            + _f(5, stat("hlo_category", category))
        )
        metadata += _f(4, _f(1, i) + _f(2, meta))
    stat_meta = b"".join(_f(5, _f(1, k) + _f(2, _f(1, k) + _f(2, n))) for n, k in _STAT_IDS.items())
    planes = b""
    for dev in range(devices):
        modules = b"".join(_f(4, event(1, 10_000 * s, 9_000)) for s in range(steps))
        xla_ops = b"".join(
            _f(4, event(i, 10_000 * s + start, dur))
            for s in range(steps)
            for i, (_, _, _, start, dur) in enumerate(ops, start=2)
        )
        lines = _f(3, _f(1, 1) + _f(2, "XLA Modules") + _f(3, 0) + modules)
        lines += _f(3, _f(1, 2) + _f(2, "XLA Ops") + _f(3, 0) + xla_ops)
        planes += _f(1, _f(1, dev) + _f(2, f"/device:TPU:{dev}") + lines + metadata + stat_meta)
    return planes


TPU_HLO = """HloModule jit_other, entry_computation_layout={(f32[1024]{0})->f32[1024]{0}}

ENTRY %main (p.1: f32[1024]) -> f32[1024] {
  %p.1 = f32[1024]{0} parameter(0)
  %fusion.1 = f32[1024]{0} add(f32[1024]{0} %p.1, f32[1024]{0} %p.1)
  %all-reduce.5 = f32[1024]{0} add(f32[1024]{0} %fusion.1, f32[1024]{0} %fusion.1)
  %all-gather-start.2 = f32[1024]{0} add(f32[1024]{0} %p.1, f32[1024]{0} %p.1)
  %fusion.2 = f32[1024]{0} add(f32[1024]{0} %p.1, f32[1024]{0} %p.1)
  ROOT %all-gather-done.2 = f32[1024]{0} add(f32[1024]{0} %p.1, f32[1024]{0} %p.1)
}

HloModule jit_step, entry_computation_layout={(f32[1024]{0})->f32[4096]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main (p.1: f32[1024]) -> f32[4096] {
  %p.1 = f32[1024]{0} parameter(0)
  %fusion.1 = f32[1024]{0} add(f32[1024]{0} %p.1, f32[1024]{0} %p.1)
  %all-reduce.5 = f32[1024]{0} all-reduce(f32[1024]{0} %fusion.1), replica_groups={}, to_apply=%add
  %all-gather-start.2 = (f32[1024]{0}, f32[4096]{0}) all-gather-start(f32[1024]{0} %all-reduce.5),
      replica_groups={{0,1,2,3}}, dimensions={0}
  %fusion.2 = f32[1024]{0} multiply(f32[1024]{0} %p.1, f32[1024]{0} %p.1)
  ROOT %all-gather-done.2 = f32[4096]{0} all-gather-done((f32[1024]{0}, f32[4096]{0}) %all-gather-start.2)
}
"""
