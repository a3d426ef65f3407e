"""A writer and a reader group (threads) on a replicated Redis while failovers are forced; then
the figures that judge it. Used by the HA tests (``tests/test_ha_failover*.py``) and by
``make chaos-ha`` (``tools/chaos_ha.py``).

The writer writes ``k<key>:<seq>`` (``keys`` events a round, waiting for their futures; the keys
chosen so that each segment has its share of them, see :func:`covering_keys`) and
logs each acknowledged event; each reader records every delivery as a
:class:`~tools.chaos_check.Delivery`. After the run the segments are read back as stored, and:

* ``lost``: acknowledged events no longer stored (asynchronous replication lost them);
* ``skipped``: acknowledged events still stored that no reader delivered (must be 0);
* ``divergences``: a (segment, offset) delivered as one event and stored (or delivered
  elsewhere) as another: two histories under one position; ``unreported_divergences``: those
  no reader was told about with a ``DataLostError`` naming the offset (must be 0; a writer
  that never saw a lost tail reuses its offsets, and readers report what they had read there);
* ``overlaps``: two live readers handing out one segment at once (must be 0);
* ``removals``: ``ReaderNotInGroupError`` raised to the application (a reader that had to be
  rejoined by application code; the run rejoins it to go on);
* ``comeback_seconds``: from the start of a failover until every reader delivered an event
  written after that start (the worst over the failovers).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from readergroup import (
    ClientConfig,
    EventStreamClientFactory,
    ReaderGroupConfig,
    ReaderGroupError,
    ReaderGroupManager,
    ReaderNotInGroupError,
    ScalingPolicy,
    StreamConfiguration,
    StreamManager,
    UTF8StringSerializer,
    WriteFuture,
)
from readergroup.core.routing import key_position, uniform_ranges
from tools.chaos_check import Delivery, check

logger = logging.getLogger(__name__)


@dataclass
class HaFigures:
    acknowledged: int
    stored: int
    delivered: int
    lost: int
    skipped: int
    divergences: int
    unreported_divergences: int
    duplicates: int
    overlaps: int
    order_violations: int
    removals: int
    reader_errors: int
    write_failures: int
    failovers: int
    comeback_seconds: float
    removal_reasons: list[str] = field(default_factory=list)
    write_failure_reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Failover:
    began: float  # wall clock
    first_seq: int  # the writer's first round begun after the failover was over


class HaRun:
    """Streams and a group on ``url``, a writer thread and ``readers`` reader threads.

    Use as: ``start()``; ``with run.failover(): <force one>`` (any number of times);
    ``finish()`` returns :class:`HaFigures`."""

    def __init__(
        self,
        url: str,
        *,
        scope: str = "ha",
        segments: int = 4,
        readers: int = 2,
        keys: int = 16,
        client: ClientConfig | None = None,
        reader_client: ClientConfig | None = None,
        group: dict[str, Any] | None = None,
        pause: float = 0.01,
        fresh_writer: bool = False,
        audit_url: str | None = None,
    ) -> None:
        self.url, self.scope, self.keys, self.pause = url, scope, keys, pause
        self._keys = covering_keys(keys, segments)
        self.audit_url = audit_url or url
        """Where the segments are read back after the run (a cluster URL naming live nodes
        when the node ``url`` names was killed)."""
        self.segments = segments
        self.client = client or ClientConfig()
        self.reader_client = reader_client or ClientConfig(
            **{**_fields(self.client), "acks": "leader"}
        )
        settings = {"heartbeat_interval": 0.3, "session_timeout": 6.0, "group_refresh_time": 0.1}
        self.group = ReaderGroupConfig(
            streams=[f"{scope}/s"], auto_commit_interval=0.2, **{**settings, **(group or {})}
        )
        with StreamManager.from_url(url, self.client) as sm:
            sm.create_scope(scope)
            sm.create_stream(
                scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))
            )
        with ReaderGroupManager.from_url(scope, url, self.client) as rgm:
            rgm.create_reader_group("g", self.group)
        self._lock = threading.Lock()
        self._stop_writer = threading.Event()
        self.fresh_writer = fresh_writer
        """After each failover the writer is replaced by a new one (another process would be
        the same): it never saw what the old primary had acknowledged."""
        self._renew_writer = threading.Event()
        self._stop_readers = threading.Event()
        self.acked: set[str] = set()
        self.write_failures: list[str] = []
        self.deliveries: list[Delivery] = []
        self.removals: list[str] = []
        self.reader_errors: list[str] = []
        self.failovers: list[_Failover] = []
        self._seq = 0
        self.thread_deaths: list[str] = []
        self._readers: dict[str, Any] = {}
        self._threads = [
            threading.Thread(target=self._recorded, args=(self._write,), name="ha-writer")
        ]
        self._threads += [
            threading.Thread(target=self._recorded, args=(self._read, f"r{i}"), name=f"ha-r{i}")
            for i in range(readers)
        ]
        for thread in self._threads:
            thread.daemon = True
        self.reader_ids = [f"r{i}" for i in range(readers)]

    # -- the run ---------------------------------------------------------------------------
    def start(self, warmup_timeout: float = 60.0) -> None:
        """Start everyone; return once every reader delivered an event."""
        for thread in self._threads:
            thread.start()
        self._wait(lambda: self._readers_delivered_since(0), warmup_timeout, "readers to start")

    def progress(self) -> str:
        """Where the run stands, for a timeout's message: what was acknowledged and delivered
        by whom, and the first failures of each kind (a thread that died names its error)."""
        with self._lock:
            per_reader = dict.fromkeys(self.reader_ids, 0)
            for d in self.deliveries:
                per_reader[d.reader] = per_reader.get(d.reader, 0) + 1
            return (
                f"acknowledged {len(self.acked)}, rounds begun {self._seq}, delivered "
                f"{per_reader}, threads alive "
                f"{[t.name for t in self._threads if t.is_alive()]}, write failures "
                f"{len(self.write_failures)} {self.write_failures[:3]}, reader errors "
                f"{len(self.reader_errors)} {self.reader_errors[:3]}, removals "
                f"{self.removals[:3]}, thread deaths {self.thread_deaths[:3]}; "
                f"{self._group_view()}"
            )

    def _group_view(self) -> str:
        """The group as its log says (members, who owns what, what is unassigned) and what
        each reader believes it owns."""
        local = {
            name: sorted(key[1] for key in r.assignment()) for name, r in self._readers.items()
        }
        try:
            with ReaderGroupManager.from_url(self.scope, self.audit_url, self.client) as rgm:
                state = rgm.get_reader_group("g").refresh()
        except ReaderGroupError as exc:
            return f"readers' own view {local}; the group's state unreadable: {exc!r}"
        owners: dict[str, list[int]] = defaultdict(list)
        for key, assignment in state.assigned.items():
            owners[assignment.reader].append(key[1])
        return (
            f"readers' own view {local}; group members "
            f"{ {r: rec.generation for r, rec in state.readers.items()} }, owners "
            f"{ {r: sorted(v) for r, v in owners.items()} }, unassigned "
            f"{sorted(k[1] for k in state.unassigned)}, reset pending {state.reset_pending}"
        )

    @contextmanager
    def failover(self) -> Iterator[None]:
        """Around forcing one failover: ``comeback_seconds`` counts from its start until every
        reader delivered an event the writer began after the failover was over."""
        began = time.time()
        yield
        with self._lock:
            self.failovers.append(_Failover(began, self._seq + 1))
        self._renew_writer.set()

    def wait_comeback(self, timeout: float) -> float:
        """Seconds from the last failover's start until every reader delivered an event written
        after it (raises ``TimeoutError`` after ``timeout``)."""
        last = self.failovers[-1]
        self._wait(lambda: self._readers_delivered_since(last.first_seq), timeout, "comeback")
        return self._comeback(last)

    def finish(self, drain_timeout: float = 60.0) -> HaFigures:
        """Stop the writer, let the readers drain what is stored, stop them, judge."""
        self._stop_writer.set()
        self._threads[0].join(120)
        stored = self._stored()
        wanted = self.acked & set(stored.values())
        deadline = time.monotonic() + drain_timeout
        while time.monotonic() < deadline and wanted - self._delivered():
            time.sleep(0.05)
        self._stop_readers.set()
        for thread in self._threads[1:]:
            thread.join(60)
        return self._figures(stored)

    # -- figures ---------------------------------------------------------------------------
    def _figures(self, stored: dict[tuple[int, int], str]) -> HaFigures:
        present = set(stored.values())
        delivered = self._delivered()
        report = check(self.acked & present, self.deliveries)
        events_at: dict[tuple[int, int], set[str]] = defaultdict(set)
        for (segment, offset), event in stored.items():
            events_at[(segment, offset)].add(event)
        for d in self.deliveries:
            events_at[(d.segment, d.offset)].add(d.event)
        diverged = [at for at, events in events_at.items() if len(events) > 1]
        reported = self._reported_losses()
        comeback = max((self._comeback(f) for f in self.failovers), default=0.0)
        return HaFigures(
            acknowledged=len(self.acked),
            stored=len(present),
            delivered=len(delivered),
            lost=len(self.acked - present),
            skipped=len((self.acked & present) - delivered),
            divergences=len(diverged),
            unreported_divergences=sum(1 for at in diverged if at not in reported),
            duplicates=report.duplicates,
            overlaps=report.overlaps,
            order_violations=report.order_violations,
            removals=len(self.removals),
            reader_errors=len(self.reader_errors),
            write_failures=len(self.write_failures),
            failovers=len(self.failovers),
            comeback_seconds=round(comeback, 2),
            removal_reasons=self.removals[:5],
            write_failure_reasons=self.write_failures[:5],
        )

    def _reported_losses(self) -> set[tuple[int, int]]:
        """(segment, offset) pairs readers were told were lost (``DataLostError``)."""
        out: set[tuple[int, int]] = set()
        with self._lock:
            errors = list(self.reader_errors)
        for error in errors:
            for number, begin, end in _LOST.findall(error):
                out.update((int(number), offset) for offset in range(int(begin), int(end) + 1))
        return out

    def _comeback(self, failover: _Failover) -> float:
        firsts = []
        with self._lock:
            deliveries = list(self.deliveries)
        for reader in self.reader_ids:
            times = [
                d.at
                for d in deliveries
                if d.reader == reader and _seq(d.event) >= failover.first_seq
            ]
            firsts.append(min(times, default=float("inf")))
        return max(firsts) - failover.began

    def _readers_delivered_since(self, first_seq: int) -> bool:
        with self._lock:
            readers = {d.reader for d in self.deliveries if _seq(d.event) >= first_seq}
        return readers >= set(self.reader_ids)

    def _delivered(self) -> set[str]:
        with self._lock:
            return {d.event for d in self.deliveries}

    def _stored(self) -> dict[tuple[int, int], str]:
        out = {}
        with EventStreamClientFactory.from_url(self.scope, self.audit_url, self.client) as factory:
            batch = factory.create_batch_client()
            for segment in range(self.segments):
                for events in batch.read_segment("s", segment, fail_on_data_loss=False):
                    for event in events:
                        out[(segment, event.offset)] = event.payload.decode()
        return out

    def _wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout}s for {what}; {self.progress()}")
            time.sleep(0.05)

    # -- threads ---------------------------------------------------------------------------
    def _recorded(self, target: Callable[..., None], *args: Any) -> None:
        """Run a thread's ``target``; an exception that ends it is recorded for ``progress()``
        (and re-raised, so the thread's death is printed as well)."""
        try:
            target(*args)
        except BaseException as exc:
            with self._lock:
                self.thread_deaths.append(f"{threading.current_thread().name}: {exc!r}")
            raise

    def _write(self) -> None:
        while not self._stop_writer.is_set():
            self._renew_writer.clear()
            self._write_with_one_writer()

    def _write_with_one_writer(self) -> None:
        with EventStreamClientFactory.from_url(self.scope, self.url, self.client) as factory:
            writer = factory.create_event_writer("s", UTF8StringSerializer())
            while not self._stop_writer.is_set():
                if self.fresh_writer and self._renew_writer.is_set():
                    break
                with self._lock:
                    self._seq += 1
                    seq = self._seq
                futures = [
                    (event, writer.write_event(event, routing_key=f"k{key}"))
                    for key in self._keys
                    for event in [f"k{key}:{seq}"]
                ]
                for event, future in futures:
                    self._settle(event, future)
                time.sleep(self.pause)
            try:
                writer.close()
            except ReaderGroupError as exc:  # a failure was recorded with its future already
                logger.warning("ha writer: close: %s", exc)

    def _settle(self, event: str, future: WriteFuture) -> None:
        try:
            future.result(timeout=300)
        except (ReaderGroupError, TimeoutError) as exc:
            with self._lock:
                self.write_failures.append(f"{event}: {exc!r}")
            return
        with self._lock:
            self.acked.add(event)

    def _read(self, name: str) -> None:
        with EventStreamClientFactory.from_url(self.scope, self.url, self.reader_client) as f:
            reader = f.create_reader(name, "g", UTF8StringSerializer())
            self._readers[name] = reader
            while not self._stop_readers.is_set():
                try:
                    batch = reader.read_batch(100, timeout=0.1)
                except ReaderNotInGroupError as exc:
                    with self._lock:
                        self.removals.append(f"{name} at {time.time():.2f}: {exc}")
                    reader.rejoin(self._stop_readers)
                    continue
                except ReaderGroupError as exc:
                    with self._lock:
                        self.reader_errors.append(f"{name}: {exc!r}")
                    time.sleep(0.1)
                    continue
                now = time.time()
                rows = [
                    Delivery(name, e.fencing_token or 0, e.segment, e.offset, e.event or "", now)
                    for e in batch
                ]
                with self._lock:
                    self.deliveries += rows
            reader.close()


_LOST = re.compile(r"DataLostError\(.segment [^ ]*/(\d+)\.#epoch\.0: offsets (\d+)\.\.(\d+)")
"""A reader's ``DataLostError`` as recorded: the segment number (segments of epoch 0 only,
as this run's fixed streams have) and the lost offsets."""


def covering_keys(keys: int, segments: int) -> list[int]:
    """``keys`` numbers ``n`` whose routing keys ``k<n>`` go to each of ``segments`` fixed
    segments in turn (the lowest such numbers), so that every segment gets events and every
    reader that owns one delivers. (``k0`` .. ``k15`` leave two of 8 segments without any:
    a reader owning just those two delivered nothing, and a run waiting for every reader to
    deliver timed out.)"""
    ranges = uniform_ranges(segments)
    wanted = [keys // segments + (1 if i < keys % segments else 0) for i in range(segments)]
    chosen: list[int] = []
    n = 0
    while len(chosen) < keys:
        position = key_position(f"k{n}")
        segment = next(i for i, (low, high) in enumerate(ranges) if low <= position < high)
        if wanted[segment] > 0:
            wanted[segment] -= 1
            chosen.append(n)
        n += 1
    return chosen


def _seq(event: str) -> int:
    return int(event.rsplit(":", 1)[1])


def _fields(config: ClientConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}
