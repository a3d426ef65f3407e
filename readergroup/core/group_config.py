"""Reader group and reader configuration (frozen, keyword-only, validated, documented)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Union

from readergroup.core.errors import InvalidConfigError
from readergroup.core.names import split_scoped_stream
from readergroup.core.stream_cut import StreamCut

#: Where a stream starts for a new group: ``"head"``, ``"tail"``, a Redis server time in ms
#: (``int``: the first events appended at or after it), or a :class:`StreamCut`.
StartPosition = Union[str, int, StreamCut]  # noqa: UP007 (a runtime alias)

#: The words a start position may be given as: Pravega's head/tail and Kafka's earliest/latest.
START_WORDS = {"head": "head", "earliest": "head", "tail": "tail", "latest": "tail"}


def start_word(value: object) -> object:
    """``"earliest"``/``"latest"`` as ``"head"``/``"tail"``; anything else unchanged."""
    return START_WORDS.get(value, value) if isinstance(value, str) else value


AUTO = "auto"
MANUAL = "manual"


@dataclass(frozen=True, kw_only=True, slots=True)
class ReaderGroupConfig:
    """How a reader group reads. Defaults follow Kafka's consumer where one exists.

    Attributes:
        streams: ``"scope/stream"`` names (or bare names) of the manager's own scope; one or
            more (a group never reads another scope's streams: scopes are isolated).
        start: where each stream starts: one :data:`StartPosition` for all, or a mapping from
            stream name to one (default ``"head"``; ``"earliest"``/``"latest"`` are accepted
            for ``"head"``/``"tail"``).
        group_refresh_time: how often a reader checks, without asking Redis, for owned
            segments read to their end and group entries its heartbeat fetched (default 0.5 s;
            0.01-60), and the default timeout of a read. Changes wake readers at once through
            the group's wake stream: a read blocks up to ``heartbeat_interval`` when its
            timeout allows, ``group_refresh_time`` while an owned segment's end is known.
        heartbeat_interval: seconds between heartbeats (default 3.0).
        session_timeout: a reader whose last heartbeat is older than this, on the Redis server's
            clock, is removed by any other member and its segments return at their last
            committed positions (default 10.0; > 2 x heartbeat_interval).
        commit_mode: ``"auto"`` (default) commits every ``auto_commit_interval`` seconds what the
            application has moved past: the event returned by the previous ``read_next_event``
            call counts as processed when the next call starts (commit-on-get). ``"manual"``
            commits only on ``reader.commit()``.
        auto_commit_interval: seconds between automatic commits (default 5.0).
        max_segment_moves: segments one reader releases per update (default 16; 1-1024);
            a release cut short is followed by another at once. Acquisitions take the
            reader's whole fair share in one update.
        max_poll_interval: a reader whose application has not called ``read_next_event`` for
            this long gives its segments back and must rejoin (default 300.0; Kafka's
            ``max.poll.interval.ms``).
        end: for bounded reads, where each stream ends: one :class:`StreamCut` per stream
            (a mapping from stream name, or a single cut for a one-stream group); readers then
            report end of data there (default None: unbounded).
        retention_subscriber: what consumption-based retention must keep for this group:
            ``"committed"`` (data before its committed positions may go; the default),
            ``"checkpoint"`` (only data before its last completed checkpoint), or ``"none"``.
    """

    streams: Sequence[str]
    start: StartPosition | Mapping[str, StartPosition] = "head"
    group_refresh_time: float = 0.5
    heartbeat_interval: float = 3.0
    session_timeout: float = 10.0
    commit_mode: str = AUTO
    auto_commit_interval: float = 5.0
    max_segment_moves: int = 16
    max_poll_interval: float = 300.0
    end: StreamCut | Mapping[str, StreamCut] | None = None
    retention_subscriber: str = "committed"

    def __post_init__(self) -> None:
        if isinstance(self.streams, str) or not self.streams:
            raise InvalidConfigError("streams must be a non-empty list of 'scope/stream' names")
        object.__setattr__(self, "streams", tuple(self.streams))
        if len(set(self.streams)) != len(self.streams):
            raise InvalidConfigError(f"streams are listed twice: {list(self.streams)}")
        if isinstance(self.start, Mapping):
            object.__setattr__(self, "start", {k: start_word(v) for k, v in self.start.items()})
            for value in self.start.values():
                _check_start(value)
        else:
            object.__setattr__(self, "start", start_word(self.start))
            _check_start(self.start)
        if not 0.01 <= self.group_refresh_time <= 60:
            raise InvalidConfigError(
                f"group_refresh_time must be 0.01..60 s: {self.group_refresh_time}"
            )
        if not self.heartbeat_interval > 0:
            raise InvalidConfigError(f"heartbeat_interval must be > 0: {self.heartbeat_interval}")
        if not self.session_timeout > 2 * self.heartbeat_interval:
            raise InvalidConfigError(
                f"session_timeout ({self.session_timeout}) must exceed twice the "
                f"heartbeat_interval ({self.heartbeat_interval})"
            )
        if self.commit_mode not in (AUTO, MANUAL):
            raise InvalidConfigError(
                f"commit_mode must be 'auto' or 'manual': {self.commit_mode!r}"
            )
        if not self.auto_commit_interval > 0:
            raise InvalidConfigError(
                f"auto_commit_interval must be > 0: {self.auto_commit_interval}"
            )
        if not 1 <= self.max_segment_moves <= 1024:
            raise InvalidConfigError(f"max_segment_moves must be 1..1024: {self.max_segment_moves}")
        if not self.max_poll_interval > 0:
            raise InvalidConfigError(f"max_poll_interval must be > 0: {self.max_poll_interval}")
        if isinstance(self.end, Mapping):
            object.__setattr__(self, "end", dict(self.end))
            if not all(isinstance(c, StreamCut) for c in self.end.values()):
                raise InvalidConfigError("end must map stream names to StreamCuts")
        elif self.end is not None and not isinstance(self.end, StreamCut):
            raise InvalidConfigError("end must be a StreamCut, a mapping of them, or None")
        if self.retention_subscriber not in ("committed", "checkpoint", "none"):
            raise InvalidConfigError(
                "retention_subscriber must be 'committed', 'checkpoint' or 'none': "
                f"{self.retention_subscriber!r}"
            )

    def scoped_streams(self, default_scope: str) -> list[tuple[str, str]]:
        return [split_scoped_stream(s, default_scope) for s in self.streams]

    def end_for(self, stream: str, scoped: str) -> StreamCut | None:
        if isinstance(self.end, Mapping):
            return self.end.get(stream, self.end.get(scoped))
        if isinstance(self.end, StreamCut) and self.end.scoped_stream == scoped:
            return self.end
        return None

    def start_for(self, stream: str, scoped: str) -> StartPosition:
        if isinstance(self.start, Mapping):
            return self.start.get(stream, self.start.get(scoped, "head"))
        return self.start


def _check_start(value: object) -> None:
    if isinstance(value, bool) or not (
        value in ("head", "tail") or isinstance(value, (int, StreamCut))
    ):
        raise InvalidConfigError(
            f"a start position is 'head', 'tail', a server time in ms or a StreamCut: {value!r}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ReaderConfig:
    """One reader's settings.

    Attributes:
        read_batch: most events fetched from one segment per round trip (default 1000).
        max_buffered_events: events buffered per segment before fetching pauses (default 5000).
        takeover: static membership (Kafka's ``group.instance.id``; default True): joining
            under an id still online replaces that incarnation at once, fencing it (it gets
            ReaderReplacedError and stops), and takes its segments over at their committed
            positions, so a restarted worker gets its segments back and no other reader
            moves. False: a live incarnation under the id is refused with
            ReaderAlreadyOnlineError until its session expires.
        prefetch_events: most events one reader holds fetched ahead of the application
            (buffered plus requested) before it stops sending reads ahead; 0 turns reading ahead
            off (default 10000).
        prefetch_bytes: the same bound in payload bytes, estimated from the events fetched
            last (default 16 MiB; 0 turns reading ahead off).
        shrunk_log_grace: seconds a reader waits, when a segment's log turns out shorter than
            what it read (a failover lost the tail) and nothing is appended past that yet,
            before it reports the events it read there lost (default 10.0; >= 0). A
            writer's retry usually appends the same events again meanwhile: they are then
            neither reported lost nor delivered twice. Commits past the shorter log are
            refused meanwhile (:class:`CommitRefusedError`, retriable).
    """

    read_batch: int = 1000
    max_buffered_events: int = 5000
    takeover: bool = True
    prefetch_events: int = 10_000
    prefetch_bytes: int = 16 << 20
    shrunk_log_grace: float = 10.0

    def __post_init__(self) -> None:
        if not 0 <= self.shrunk_log_grace <= 3600:
            raise InvalidConfigError(f"shrunk_log_grace must be 0..3600 s: {self.shrunk_log_grace}")
        if not 1 <= self.read_batch <= 100_000:
            raise InvalidConfigError(f"read_batch must be 1..100000: {self.read_batch}")
        if self.max_buffered_events < self.read_batch:
            raise InvalidConfigError("max_buffered_events must be >= read_batch")
        for name in ("prefetch_events", "prefetch_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidConfigError(f"{name} must be an int >= 0: {value!r}")
