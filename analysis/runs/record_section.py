"""The base of the record's sections (:mod:`analysis.runs.record`): reading one from its JSON
object, writing it back, and building one where a writer fills it.

A section remembers the keys its JSON object held, in order (``_keys``), and which of them were
``null`` where the field holds an empty stand-in (``_nulls``: an empty section, ``{}``, ``()``).
:meth:`_Section.to_json` writes those keys back as they were, null included, then every other
field that holds something (not None, not empty): so ``Section.from_json(d).to_json() == d`` for
every object whose keys are all declared, and a writer's section (built with :meth:`_Section.of`,
which records the keys it is given) writes the keys it was given, null included, in that order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar


def _section(value) -> dict:
    """A JSON object, or an empty one for anything else (missing, ``null``, a list)."""
    return value if isinstance(value, dict) else {}


def _items(value) -> list:
    """A JSON array, or an empty one for anything else."""
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class _Section:
    """``from_json`` and ``to_json`` for the frozen dataclasses of the record: each field from
    the key of its name (None where missing), the fields named in ``_NESTED`` read as those
    sections (an empty one where missing or null)."""

    # the keys of the JSON object read (or the keyword arguments of of()), in order; and those
    # of them that were null where the field holds an empty stand-in: written back as they were
    _keys: tuple = field(default=(), repr=False, compare=False, kw_only=True)
    _nulls: frozenset = field(default=frozenset(), repr=False, compare=False, kw_only=True)
    _NESTED: ClassVar[dict[str, type]] = {}

    @classmethod
    def from_json(cls, d):
        """The section from its JSON object; what the object lacks is None (an empty section
        for a nested one)."""
        d = _section(d)
        return cls(**{f.name: _read(cls._NESTED.get(f.name), d.get(f.name)) for f in _keyed(cls)}, **shape(cls, d))

    @classmethod
    def of(cls, **values):
        """The section a writer fills: ``values`` by field name (a nested section given None
        stands empty and is written null), written back with exactly these keys, in this order."""
        return cls().with_(**values)

    def with_(self, **values):
        """This section with ``values`` set, as a writer adds to it: each key written back
        (null included), in its place where the section had it, else after the keys it had."""
        nested = {k for k in values if k in self._NESTED and values[k] is None}
        filled = {k: (self._NESTED[k]() if k in nested else v) for k, v in values.items()}
        keys = self._keys + tuple(k for k in values if k not in self._keys)
        nulls = (self._nulls - set(values)) | nested
        return dataclasses.replace(self, **filled, _keys=keys, _nulls=frozenset(nulls))

    def given(self) -> dict:
        """The fields this section holds a key for, in order (a null section as None): what
        :meth:`with_` takes to set the same keys on another record."""
        names = {f.name for f in _keyed(type(self))}
        return {k: (None if k in self._nulls else getattr(self, k)) for k in self._keys if k in names}

    def to_json(self) -> dict:
        """The section as its JSON object: the keys it was read with (or given), then every
        other field that holds something (see the module's docstring)."""
        fields = _keyed(type(self))
        names = {f.name for f in fields}
        out = {}
        for name in self._keys:
            if name in names:  # a key no field declares is dropped: the round-trip test finds it
                out[name] = None if name in self._nulls else dump(getattr(self, name))
        for f in fields:
            if f.name not in out and not empty(value := getattr(self, f.name)):
                out[f.name] = dump(value)
        return out


def shape(cls, d: dict) -> dict:
    """The keys ``d`` held and those null where ``cls`` keeps an empty stand-in: what
    :meth:`_Section.to_json` needs to write ``d`` back (keyword arguments of the constructor)."""
    stand_in = {f.name for f in _keyed(cls) if f.name in cls._NESTED or _has_empty_default(f)}
    return {"_keys": tuple(d), "_nulls": frozenset(k for k in stand_in if k in d and d[k] is None)}


def _has_empty_default(f) -> bool:
    return f.default_factory is not dataclasses.MISSING or f.default == ()


def _read(kind, value):
    return kind.from_json(value) if kind is not None else value


def _keyed(cls) -> list:
    """The fields of ``cls`` read from a key of their own name (all but ``Config.tree`` and the
    bookkeeping of :class:`_Section`)."""
    return [f for f in dataclasses.fields(cls) if f.name not in ("tree", "_keys", "_nulls")]


def empty(value) -> bool:
    """Whether a field holds nothing to write: None, an empty mapping or list, an empty section."""
    if isinstance(value, _Section):
        return not value.to_json()
    return value is None or (isinstance(value, (dict, list, tuple)) and not value)


def dump(value):
    """``value`` as JSON: sections by their ``to_json``, inside lists, tuples and mappings too."""
    if isinstance(value, _Section):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [dump(v) for v in value]
    if isinstance(value, dict):
        return {k: dump(v) for k, v in value.items()}
    return value
