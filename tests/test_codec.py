"""The wire format: round trips, registry rules, and garbage that must never crash."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readergroup import JsonSerializer, SerializationError
from statesync import EncodeError, Update
from statesync.codec import FORMAT_VERSION, MAX_EXT_DEPTH, Codec, TypeRegistry
from statesync.errors import DecodeError, UnknownTypeError
from tests.support.hostile import hostile_entry
from tests.support.model import Add, Put


@dataclass(frozen=True)
class Point:
    x: int
    y: tuple[int, ...]


CODEC = Codec(TypeRegistry([Add, Put, Point]))

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
hashables = st.recursive(scalars, lambda inner: st.tuples(inner, inner), max_leaves=4)
values = st.recursive(
    scalars | st.builds(Point, st.integers(-(2**63), 2**63), st.tuples(st.integers(0, 9))),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(hashables, inner, max_size=4)
        | st.tuples(inner, inner)
        | st.frozensets(hashables, max_size=4)
    ),
    max_leaves=20,
)


@given(values)
def test_every_supported_value_round_trips(value: object) -> None:
    assert CODEC.decode_value(CODEC.encode_value(value)) == value


@given(st.lists(st.builds(Add, st.integers(-1000, 1000)), max_size=5), st.text(max_size=10))
def test_entries_round_trip(updates: list[Add], writer: str) -> None:
    entry = CODEC.decode_entry(7, 1234, CODEC.encode_entry(writer, updates))
    assert entry.revision == 7 and entry.server_time_ms == 1234
    assert entry.writer == writer and list(entry.updates) == updates


def test_snapshot_round_trip_keeps_revision_and_time() -> None:
    snap = CODEC.decode_snapshot(CODEC.encode_snapshot(42, 99, {"p": Point(1, (2, 3))}))
    assert (snap.revision, snap.server_time_ms, snap.state) == (42, 99, {"p": Point(1, (2, 3))})


def test_tuples_and_frozensets_keep_their_types() -> None:
    decoded = CODEC.decode_value(CODEC.encode_value({(1, 2): frozenset({3}), "t": (4,)}))
    assert decoded == {(1, 2): frozenset({3}), "t": (4,)}
    assert type(decoded["t"]) is tuple


def test_unregistered_dataclass_is_a_clear_encode_error() -> None:
    @dataclass(frozen=True)
    class Stranger:
        a: int

    with pytest.raises(EncodeError, match="Stranger is not registered"):
        CODEC.encode_value({"x": Stranger(1)})


def test_out_of_range_integers_are_named() -> None:
    with pytest.raises(EncodeError, match="outside msgpack's range"):
        CODEC.encode_value([2**64])


def test_unsupported_types_are_refused() -> None:
    with pytest.raises(EncodeError, match="cannot be stored"):
        CODEC.encode_value({1, 2})  # a mutable set: ambiguous, refused
    with pytest.raises(EncodeError):
        CODEC.encode_value(object())


def test_two_classes_under_one_name_are_refused() -> None:
    @dataclass(frozen=True)
    class Add:  # same name as the registered tests.support.model.Add
        amount: int

    with pytest.raises(EncodeError, match="registered twice"):
        TypeRegistry([Add, __import__("tests.support.model", fromlist=["Add"]).Add])


def test_non_update_in_an_entry_is_refused() -> None:
    with pytest.raises(EncodeError, match="not an Update"):
        CODEC.encode_entry("w", [Point(1, ())])  # type: ignore[list-item]


def test_unknown_type_names_are_reported_as_unknown() -> None:
    other = Codec(TypeRegistry([Add, Put, Point]))
    only_add = Codec(TypeRegistry([Add]))
    payload = other.encode_entry("w", [Put("k", 1)])
    with pytest.raises(UnknownTypeError, match="'Put'"):
        only_add.decode_entry(1, 0, payload)


def test_newer_format_versions_are_refused() -> None:
    payload = msgpack.packb({"v": FORMAT_VERSION + 1, "w": "w", "u": []})
    with pytest.raises(DecodeError, match=f"format version {FORMAT_VERSION + 1}"):
        CODEC.decode_entry(1, 0, payload)


@dataclass(frozen=True)
class Move(Update):
    """An update with a tagged field (``note``), as a later version might add one."""

    tagged_fields: ClassVar[frozenset[str]] = frozenset({"note"})

    key: str
    note: str = ""

    def apply_to(self, state: object) -> object:
        return state


TAGGED = Codec(TypeRegistry([Move, Add]))


def tagged_entry(fields: dict[str, object], tagged: dict[str, object], version: int = 1) -> bytes:
    """An entry of one ``Move`` written as extension 5, fields as given."""
    payload = msgpack.packb(["Move", version, fields, tagged], use_bin_type=True)
    return msgpack.packb({"v": 3, "w": "w", "u": [msgpack.ExtType(5, payload)]}, use_bin_type=True)


def test_entries_for_older_readers_hold_no_tagged_update() -> None:
    """Below format 3 an entry is what earlier versions wrote (and read): frame version 1,
    each update's fields by name; at 3 its updates are tagged (frame version 3). Both decode
    to the same updates."""
    updates = [Move("a", "why"), Add(2)]
    for version, frame in ((2, 1), (3, 3)):
        payload = TAGGED.encode_entry("w", updates, version=version)
        body = msgpack.unpackb(payload, raw=False)
        assert body["v"] == frame
        assert {ext.code for ext in body["u"]} == ({2} if frame == 1 else {5})
        assert list(TAGGED.decode_entry(1, 0, payload).updates) == updates


def test_a_tagged_field_at_its_default_is_left_out() -> None:
    body = msgpack.unpackb(TAGGED.encode_entry("w", [Move("a")]), raw=False)
    assert msgpack.unpackb(body["u"][0].data, raw=False) == ["Move", 1, {"key": "a"}, {}]


def test_unknown_tagged_fields_are_dropped() -> None:
    """A later version's tagged field this version does not know: skipped."""
    entry = tagged_entry({"key": "a"}, {"note": "n", "added_later": [1, 2]})
    assert TAGGED.decode_entry(1, 0, entry).updates == (Move("a", "n"),)


def test_unknown_ordinary_fields_and_newer_type_versions_are_refused() -> None:
    with pytest.raises(DecodeError, match=r"\['added_later'\].*newer version"):
        TAGGED.decode_entry(1, 0, tagged_entry({"key": "a", "added_later": 1}, {}))
    with pytest.raises(DecodeError, match="type version 2, newer than this version's 1"):
        TAGGED.decode_entry(1, 0, tagged_entry({"key": "a"}, {}, version=2))
    with pytest.raises(DecodeError, match="cannot build Move"):
        TAGGED.decode_entry(1, 0, tagged_entry({}, {"note": "n"}))
    with pytest.raises(DecodeError, match="tagged payload is not"):
        TAGGED.decode_entry(
            1,
            0,
            msgpack.packb(
                {"v": 3, "w": "w", "u": [msgpack.ExtType(5, msgpack.packb(["Move", 1]))]}
            ),
        )


def test_wrong_fields_for_a_registered_type_are_corrupt() -> None:
    bad = msgpack.packb(
        {"v": 1, "w": "w", "u": [msgpack.ExtType(2, msgpack.packb(["Add", {"nope": 1}]))]}
    )
    with pytest.raises(DecodeError, match="cannot build Add"):
        CODEC.decode_entry(1, 0, bad)


@given(st.binary(max_size=200))
def test_garbage_bytes_only_ever_raise_decode_error(data: bytes) -> None:
    for decode in (
        lambda: CODEC.decode_entry(1, 0, data),
        lambda: CODEC.decode_snapshot(data),
    ):
        with contextlib.suppress(DecodeError):
            decode()


@given(values)
def test_well_formed_msgpack_that_is_not_an_entry_raises_decode_error(value: object) -> None:
    with pytest.raises(DecodeError):
        CODEC.decode_entry(1, 0, CODEC.encode_value([value]))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 600), st.sampled_from([1, 2, 3]))
def test_nested_extensions_are_bounded_and_never_crash(depth: int, code: int) -> None:
    data = hostile_entry(depth, code)
    for decode in (
        lambda: CODEC.decode_entry(1, 0, data),
        lambda: CODEC.decode_snapshot(data),
        lambda: CODEC.decode_value(data),
    ):
        with contextlib.suppress(DecodeError):
            decode()
    if depth > MAX_EXT_DEPTH:
        with pytest.raises(DecodeError, match="nested more than"):
            CODEC.decode_value(data)


def test_nesting_up_to_the_bound_round_trips_and_beyond_it_is_refused_on_encode() -> None:
    value: object = 1
    for _ in range(MAX_EXT_DEPTH):
        value = (value,)
    assert CODEC.decode_value(CODEC.encode_value(value)) == value
    with pytest.raises(EncodeError, match="more than"):
        CODEC.encode_value((value,))


@given(
    st.sampled_from([0xC6, 0xDB, 0xDD, 0xDF, 0xC9, 0xC5, 0xD9]),  # bin32 str32 arr32 map32 ext
    st.integers(2**20, 2**32 - 1),
    st.binary(max_size=16),
)
def test_huge_length_prefixes_are_decode_errors(marker: int, length: int, tail: bytes) -> None:
    width = {0xC5: 2, 0xD9: 1}.get(marker, 4)
    length %= 1 << (8 * width)
    data = bytes([marker]) + length.to_bytes(width, "big") + tail
    with pytest.raises(DecodeError):
        CODEC.decode_entry(1, 0, data)


@given(st.integers(0, 127), st.binary(max_size=64))
def test_any_extension_code_is_a_decode_error_or_a_value(code: int, payload: bytes) -> None:
    data = msgpack.packb({"v": 1, "w": "w", "u": [msgpack.ExtType(code, payload)]})
    with contextlib.suppress(DecodeError):
        CODEC.decode_entry(1, 0, data)


def test_a_hostile_nested_entry_cannot_kill_the_decoding_process() -> None:
    """The entry that overflowed the C stack (SIGSEGV) now ends in a DecodeError, even in a
    thread of a fresh interpreter."""
    script = (
        "import sys, threading\n"
        "from statesync.codec import Codec, TypeRegistry, DecodeError\n"
        "data = bytes.fromhex(sys.stdin.read())\n"
        "def run():\n"
        "    try:\n"
        "        Codec(TypeRegistry()).decode_entry(1, 0, data)\n"
        "    except DecodeError as exc:\n"
        "        print('DecodeError', exc)\n"
        "t = threading.Thread(target=run); t.start(); t.join()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=hostile_entry(200).hex(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "DecodeError" in done.stdout and "nested more than" in done.stdout


def test_deeply_nested_json_is_a_serialization_error() -> None:
    with pytest.raises(SerializationError, match="too deeply"):
        JsonSerializer[object]().deserialize(b"[" * 100_000)
