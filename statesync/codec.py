"""Encoding of log entries and snapshots: msgpack with an explicit type registry.

Pure code: no I/O. Never pickle: decoding bytes read from Redis can only build plain
msgpack values, tuples, frozensets, and instances of dataclasses registered here.

Wire format (``FORMAT_VERSION`` 3; versions 1 and 2 are read too)
-------------------------------------------------------------------
* Values are msgpack with four extension types:
  ``1`` tuple (payload: msgpack array), ``2`` registered dataclass (payload: msgpack
  ``[type_name, {field: value}]``), ``3`` frozenset (payload: msgpack array), and (format 2)
  ``4`` registered dataclass in its own compact form (payload: msgpack
  ``[type_name, wire]``, where ``wire`` is what the class's ``to_wire()`` returned and its
  classmethod ``from_wire(wire)`` builds the value back). A class with such a form (a large
  state, say: one msgpack array per column instead of one extension per object) defines both.
  Other read-only mappings and sets are written as msgpack maps and frozensets.
* A log entry is the map ``{"v": 1, "w": writer_id, "u": [update, ...]}``: every update of
  one ``update_state`` call travels in one entry and is applied atomically. Keys of the map
  other than these are ignored by every version.
* (format 3) An entry's updates may be written as extension ``5``, a *tagged* update: payload
  ``[type_name, type_version, fields, tagged]``. ``type_version`` is the class's
  ``wire_version`` when written (a reader refuses a version newer than its own class's);
  ``fields`` holds the fields every reader must know (an unknown one is refused); ``tagged``
  the class's ``tagged_fields`` that differ from their defaults: fields a reader that does not
  know them may drop, because the update means the same without them, only with less detail
  (Kafka's tagged fields). So a later version can add a tagged field without breaking this
  one. Extension ``2`` stays strict (an unknown field is refused), as every earlier version
  reads it; a tagged field at its default is left out there too, so an update that gained a
  tagged field still reads in every earlier version while the field keeps its default.
* A snapshot is the map ``{"v": 1, "r": revision, "t": server_time_ms, "s": state}``.
* ``"v"`` is 3 when the entry holds tagged updates, else 2 when the value holds a compact form
  (extension ``4``), else 1, so readers of an older format keep reading everything that does
  not need a newer one. ``Codec(..., compact=False)`` (or :meth:`Codec.generic`) writes format
  1 only; :meth:`Codec.encode_entry` writes tagged updates only when told the log's readers
  all read format 3 (``version``), so a log shared with older readers stays readable to them.

Any other shape, an unknown ``v``, or an unregistered type name is rejected with a
specific exception; the caller turns it into a :class:`~statesync.errors.BadEntryError`
naming the synchronizer and revision.

Bounds: extension types nest at most :data:`MAX_EXT_DEPTH` deep (each level is a nested call
of msgpack's C unpacker with a large C stack frame: hostile bytes nesting ~200 levels would
overflow the C stack and kill the process before Python's recursion limit applies), and a value
is at most :data:`MAX_VALUE_BYTES` long. Both are checked on encode too, so nothing written by
this library is refused on read.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, MutableMapping, MutableSet, Set
from dataclasses import dataclass
from typing import Any

import msgpack

from statesync.errors import DecodeError, EncodeError, UnknownTypeError
from statesync.update import Update

FORMAT_VERSION = 3
"""The newest format this library reads and writes (entries of tagged updates)."""

COMPACT_VERSION = 2
"""The format of values with a compact form (extension 4); entries of it hold no tagged
update, so every reader of format 2 reads them."""

_GENERIC_VERSION = 1
"""Values without a compact form are written in format 1, which older readers understand."""

_EXT_TUPLE = 1
_EXT_DATACLASS = 2
_EXT_FROZENSET = 3
_EXT_COMPACT = 4
_EXT_TAGGED = 5

MAX_EXT_DEPTH = 32
"""Most nested extension values (tuple, frozenset, dataclass) in one encoded value."""

MAX_VALUE_BYTES = 256 * 1024 * 1024
"""Largest encoded value (entry or snapshot) decoded at all; callers enforce tighter limits."""


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    """One log entry after decoding: the updates of one append, in order."""

    revision: int
    server_time_ms: int
    writer: str
    updates: tuple[Update, ...]


@dataclass(frozen=True, slots=True)
class DecodedSnapshot:
    """A snapshot after decoding: the whole state as of ``revision``."""

    revision: int
    server_time_ms: int
    state: Any


def type_name_of(cls: type) -> str:
    """The name a registered class is written under: ``cls.type_name`` or its ``__name__``."""
    explicit = getattr(cls, "type_name", None)
    return explicit if isinstance(explicit, str) else cls.__name__


class TypeRegistry:
    """The dataclasses a codec may encode and decode, by their type names.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Point:
    ...     x: int
    ...     y: int
    >>> codec = Codec(TypeRegistry([Point]))
    >>> codec.decode_value(codec.encode_value({"p": Point(1, 2), "k": (1, 2)}))
    {'p': Point(x=1, y=2), 'k': (1, 2)}
    """

    def __init__(self, types: Iterable[type] = ()) -> None:
        self._by_name: dict[str, type] = {}
        self._by_type: dict[type, str] = {}
        for cls in types:
            self.register(cls)

    def register(self, cls: type) -> None:
        """Register a dataclass; a second class under the same name is an error."""
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise EncodeError(
                f"{cls!r} is not a dataclass type; only dataclasses can be registered"
            )
        name = type_name_of(cls)
        existing = self._by_name.get(name)
        if existing is not None and existing is not cls:
            raise EncodeError(
                f"type name {name!r} is registered twice ({existing!r} and {cls!r}); "
                "set a distinct `type_name` class attribute on one of them"
            )
        self._by_name[name] = cls
        self._by_type[cls] = name

    @property
    def fingerprint(self) -> frozenset[tuple[str, type]]:
        """A hashable identity of what is registered (two equal registries decode alike)."""
        return frozenset(self._by_name.items())

    def name_of(self, cls: type) -> str | None:
        return self._by_type.get(cls)

    def lookup(self, name: str) -> type | None:
        return self._by_name.get(name)

    def __contains__(self, cls: object) -> bool:
        return cls in self._by_type


class _Written:
    """What one top-level encoding used (to choose the format version it is labelled with)."""

    __slots__ = ("compact", "tagged")

    def __init__(self) -> None:
        self.compact = False
        self.tagged = False

    @property
    def version(self) -> int:
        if self.tagged:
            return FORMAT_VERSION
        return COMPACT_VERSION if self.compact else _GENERIC_VERSION


@functools.cache
def _init_fields(cls: type) -> frozenset[str]:
    """The names of ``cls``'s ``__init__`` fields (a registered dataclass)."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.init)


def _tagged_defaults(obj: Any) -> frozenset[str]:
    """The tagged fields of update ``obj`` at their defaults: left out in every format (the
    reader's default stands in), so a tagged field added later reaches no reader of format 2
    while it keeps its default (writers leave it so in that format)."""
    if not isinstance(obj, Update) or not obj.tagged_fields:
        return frozenset()
    return frozenset(
        spec.name
        for spec in dataclasses.fields(obj)  # type: ignore[arg-type]  # an Update dataclass
        if spec.name in obj.tagged_fields
        and spec.default is not dataclasses.MISSING
        and getattr(obj, spec.name) == spec.default
    )


class _Tagged:
    """An update to be written as a tagged update (extension 5)."""

    __slots__ = ("update",)

    def __init__(self, update: Update) -> None:
        self.update = update

    def payload(self) -> list[Any]:
        """``[type_name, type_version, fields, tagged]`` (tagged fields at their default are
        left out)."""
        update = self.update
        fields: dict[str, Any] = {}
        tagged: dict[str, Any] = {}
        for spec in dataclasses.fields(update):  # type: ignore[arg-type]  # an Update dataclass
            if not spec.init:
                continue
            value = getattr(update, spec.name)
            if spec.name not in update.tagged_fields:
                fields[spec.name] = value
            elif spec.default is dataclasses.MISSING or value != spec.default:
                tagged[spec.name] = value
        return [type_name_of(type(update)), update.wire_version, fields, tagged]


class Codec:
    """Encodes and decodes values, log entries and snapshots with one :class:`TypeRegistry`.

    ``compact``: write registered classes that define ``to_wire``/``from_wire`` in that form
    (format 2); ``False`` writes every dataclass field by field (format 1, for readers of
    older versions). Both are always read.
    """

    def __init__(self, registry: TypeRegistry, *, compact: bool = True) -> None:
        self.registry = registry
        self.compact = compact

    def generic(self) -> Codec:
        """The same registry, writing format 1 only (no compact forms)."""
        return Codec(self.registry, compact=False)

    # -- values -----------------------------------------------------------------------------
    def encode_value(self, value: Any) -> bytes:
        return self._encode(value, 0, _Written())

    def _encode(self, value: Any, depth: int, written: _Written) -> bytes:
        if depth > MAX_EXT_DEPTH:
            raise EncodeError(
                f"value nests tuples, frozensets or dataclasses more than {MAX_EXT_DEPTH} deep"
            )
        try:
            packed: bytes = msgpack.packb(
                value,
                default=lambda obj: self._default(obj, depth + 1, written),
                use_bin_type=True,
                strict_types=True,
            )
        except EncodeError:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            raise EncodeError(f"cannot encode {type(value).__name__}: {exc}") from exc
        return packed

    def decode_value(self, data: bytes) -> Any:
        """Decode one value; :class:`DecodeError` on anything else, whatever the bytes."""
        return self._decode(data, 0)

    def _decode(self, data: bytes, depth: int) -> Any:
        if depth > MAX_EXT_DEPTH:
            raise DecodeError(f"extension values nested more than {MAX_EXT_DEPTH} deep")
        if len(data) > MAX_VALUE_BYTES:
            raise DecodeError(f"value is {len(data)} bytes, over {MAX_VALUE_BYTES}")
        try:
            return msgpack.unpackb(
                data,
                ext_hook=lambda code, payload: self._ext_hook(code, payload, depth + 1),
                raw=False,
                strict_map_key=False,
                use_list=True,
            )
        except DecodeError:
            raise
        except Exception as exc:  # msgpack raises several unrelated types on garbage
            raise DecodeError(f"not valid msgpack: {exc}") from exc

    def _default(self, obj: Any, depth: int, written: _Written) -> Any:
        if type(obj) is _Tagged:
            written.tagged = True
            return msgpack.ExtType(_EXT_TAGGED, self._encode(obj.payload(), depth, written))
        if type(obj) is tuple:
            return msgpack.ExtType(_EXT_TUPLE, self._encode(list(obj), depth, written))
        if type(obj) is frozenset:
            return msgpack.ExtType(_EXT_FROZENSET, self._encode(list(obj), depth, written))
        name = self.registry.name_of(type(obj))
        if name is not None:
            to_wire = getattr(obj, "to_wire", None)
            if self.compact and to_wire is not None:
                written.compact = True
                payload = self._encode([name, to_wire()], depth, written)
                return msgpack.ExtType(_EXT_COMPACT, payload)
            left_out = _tagged_defaults(obj)
            fields = {
                f.name: getattr(obj, f.name)
                for f in dataclasses.fields(obj)
                if f.init and f.name not in left_out
            }
            return msgpack.ExtType(_EXT_DATACLASS, self._encode([name, fields], depth, written))
        # read-only (e.g. persistent) mappings and sets: a msgpack map, a frozenset
        if isinstance(obj, Mapping) and not isinstance(obj, MutableMapping):
            return dict(obj.items())
        if isinstance(obj, Set) and not isinstance(obj, MutableSet):
            return msgpack.ExtType(_EXT_FROZENSET, self._encode(list(obj), depth, written))
        if type(obj) is int:
            raise EncodeError(f"integer {obj} is outside msgpack's range -2**63 .. 2**64-1")
        if dataclasses.is_dataclass(obj):
            raise EncodeError(
                f"dataclass {type(obj).__qualname__} is not registered with this synchronizer "
                "(pass it in update_types= or state_types=)"
            )
        raise EncodeError(
            f"values of type {type(obj).__qualname__} cannot be stored: use msgpack types "
            "(None, bool, int, float, str, bytes, list, dict), tuple, frozenset or a "
            "registered dataclass"
        )

    def _ext_hook(self, code: int, data: bytes, depth: int) -> Any:
        if code == _EXT_TUPLE:
            return tuple(self._expect(self._decode(data, depth), list, "tuple payload"))
        if code == _EXT_FROZENSET:
            try:
                return frozenset(self._expect(self._decode(data, depth), list, "frozenset payload"))
            except TypeError as exc:
                raise DecodeError(f"frozenset member is not hashable: {exc}") from exc
        if code == _EXT_COMPACT:
            return self._compact(self._expect(self._decode(data, depth), list, "compact payload"))
        if code == _EXT_TAGGED:
            return self._tagged(self._expect(self._decode(data, depth), list, "tagged payload"))
        if code == _EXT_DATACLASS:
            payload = self._expect(self._decode(data, depth), list, "dataclass payload")
            if len(payload) != 2 or not isinstance(payload[0], str):
                raise DecodeError("dataclass payload is not [type_name, fields]")
            name, fields = payload[0], self._expect(payload[1], dict, "dataclass fields")
            cls = self.registry.lookup(name)
            if cls is None:
                raise UnknownTypeError(f"unregistered type {name!r}")
            try:
                return cls(**fields)
            except Exception as exc:  # wrong fields, or the class's own validation
                raise DecodeError(
                    f"cannot build {name} from {sorted(map(str, fields))}: {exc}"
                ) from exc
        raise DecodeError(f"unknown msgpack extension type {code}")

    def _tagged(self, payload: list[Any]) -> Any:
        """A tagged update (extension 5): unknown tagged fields are dropped; an unknown
        ordinary field, or a type version newer than the class's, is refused."""
        if len(payload) != 4 or not isinstance(payload[0], str) or type(payload[1]) is not int:
            raise DecodeError("tagged payload is not [type_name, type_version, fields, tagged]")
        name, version = payload[0], payload[1]
        fields = self._expect(payload[2], dict, "tagged update fields")
        tagged = self._expect(payload[3], dict, "tagged update tagged fields")
        cls = self.registry.lookup(name)
        if cls is None:
            raise UnknownTypeError(f"unregistered type {name!r} (written by a newer version?)")
        known = getattr(cls, "wire_version", 1)
        if version > known:
            raise DecodeError(
                f"{name} of type version {version}, newer than this version's {known}: "
                "written by a newer version of the library (upgrade this process)"
            )
        names = _init_fields(cls)
        if not fields.keys() <= names:
            unknown = sorted(map(str, fields.keys() - names))
            raise DecodeError(
                f"{name} holds fields {unknown} this version does not know and may not skip: "
                "written by a newer version of the library (upgrade this process)"
            )
        known_tagged = {k: v for k, v in tagged.items() if k in names} if tagged else tagged
        try:
            return cls(**fields, **known_tagged)
        except Exception as exc:  # missing or repeated fields, or the class's own validation
            raise DecodeError(
                f"cannot build {name} from {sorted(map(str, [*fields, *known_tagged]))}: {exc}"
            ) from exc

    def _compact(self, payload: list[Any]) -> Any:
        if len(payload) != 2 or not isinstance(payload[0], str):
            raise DecodeError("compact payload is not [type_name, wire]")
        name, wire = payload
        cls = self.registry.lookup(name)
        if cls is None:
            raise UnknownTypeError(f"unregistered type {name!r}")
        from_wire = getattr(cls, "from_wire", None)
        if from_wire is None:
            raise DecodeError(f"type {name} has no compact form (no from_wire)")
        try:
            return from_wire(wire)
        except Exception as exc:  # malformed columns, or the class's own validation
            raise DecodeError(f"cannot build {name} from its compact form: {exc}") from exc

    @staticmethod
    def _expect(value: Any, kind: type, what: str) -> Any:
        if not isinstance(value, kind):
            raise DecodeError(f"{what} is {type(value).__name__}, expected {kind.__name__}")
        return value

    # -- entries ----------------------------------------------------------------------------
    def encode_entry(
        self, writer: str, updates: Iterable[Update], *, version: int = FORMAT_VERSION
    ) -> bytes:
        """One entry. ``version``: the newest format every reader of the log reads; below 3
        the updates are written as every earlier version reads them (extension 2, each field
        by name), so nothing in the entry needs a format they lack."""
        update_list = list(updates)
        for update in update_list:
            if not isinstance(update, Update):
                raise EncodeError(f"{update!r} is not an Update")
            if type(update) not in self.registry:
                raise EncodeError(
                    f"update type {type(update).__qualname__} is not registered "
                    "(pass it in update_types=)"
                )
        if version < FORMAT_VERSION:
            return self._framed({"w": writer}, "u", update_list)
        return self._framed({"w": writer}, "u", [_Tagged(u) for u in update_list])

    def decode_entry(self, revision: int, server_time_ms: int, data: bytes) -> DecodedEntry:
        body = self._expect(self.decode_value(data), dict, "entry")
        self._check_version(body)
        updates = body.get("u")
        writer = body.get("w")
        if not isinstance(updates, list) or not isinstance(writer, str):
            raise DecodeError("entry lacks its writer 'w' or update list 'u'")
        for update in updates:
            if not isinstance(update, Update):
                raise DecodeError(f"entry holds {type(update).__name__}, not an Update")
        return DecodedEntry(revision, server_time_ms, writer, tuple(updates))

    # -- snapshots --------------------------------------------------------------------------
    def encode_snapshot(self, revision: int, server_time_ms: int, state: Any) -> bytes:
        return self._framed({"r": revision, "t": server_time_ms}, "s", state)

    def _framed(self, head: dict[str, Any], key: str, value: Any) -> bytes:
        """The map ``{"v": version, **head, key: value}``, ``value`` encoded once: the version
        is 2 only if it holds a compact form."""
        written = _Written()
        body = self._encode(value, 0, written)
        fields = {"v": written.version, **head}
        packer = msgpack.Packer(use_bin_type=True)
        parts = [packer.pack_map_header(len(fields) + 1)]
        for name, field_value in fields.items():
            parts += (packer.pack(name), packer.pack(field_value))
        parts += (packer.pack(key), body)
        return b"".join(parts)

    def decode_snapshot(self, data: bytes) -> DecodedSnapshot:
        body = self._expect(self.decode_value(data), dict, "snapshot")
        self._check_version(body)
        revision, server_time = body.get("r"), body.get("t")
        if not isinstance(revision, int) or not isinstance(server_time, int) or "s" not in body:
            raise DecodeError("snapshot lacks its revision 'r', time 't' or state 's'")
        return DecodedSnapshot(revision, server_time, body["s"])

    @staticmethod
    def _check_version(body: dict[Any, Any]) -> None:
        version = body.get("v")
        if type(version) is not int or not _GENERIC_VERSION <= version <= FORMAT_VERSION:
            raise DecodeError(
                f"format version {version!r} is not supported (this library reads "
                f"{_GENERIC_VERSION} to {FORMAT_VERSION})"
            )
