"""Dead letters: retry a failing handler, then park its event in a dead-letter stream and go on.

Without a policy, :func:`~readergroup.client.runner.run` stops at the first event its handler
cannot handle (the default: nothing is skipped silently). With one::

    policy = DeadLetterPolicy(factory.create_event_writer("orders-dlq", BytesSerializer()))
    reader.run(policy.wrap(handle))

each event is handled by up to ``max_attempts`` calls of ``handle`` (a jittered exponential
backoff between them); an event that still fails is written to the dead-letter stream, with
its error, attempt count, stream, segment, offset, routing key and stored payload, and only
once that write is acknowledged does the wrapper return: the run counts the event handled and
commits past it like any other. If the dead letter cannot be written, :class:`DeadLetterError`
is raised and the run stops as it would without a policy (the event is not skipped).

A dead letter keeps the event's routing key, so a key's dead letters stay in order, and its
headers (as the letter's own, like Kafka Connect's dead-letter queue);
:meth:`DeadLetter.from_bytes` decodes one (read the stream with ``BytesSerializer``).
"""

from __future__ import annotations

import base64
import json
import logging
import random
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Generic, TypeVar

from readergroup.client.event_read import EventRead
from readergroup.client.writer import EventStreamWriter
from readergroup.core.errors import DeadLetterError, InvalidConfigError
from statesync.clock import Clock
from statesync.system_clock import SYSTEM_CLOCK

T = TypeVar("T")

logger = logging.getLogger(__name__)

DEAD_LETTER_FORMAT = 1
"""Version of a dead letter's JSON document (``"format"``)."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One parked event: where it was, how it failed, and its stored payload."""

    stream: str
    segment: int
    offset: int
    routing_key: str | None
    fencing_token: int | None
    attempts: int
    error_type: str
    error: str
    traceback: str
    payload: bytes
    format: int = DEAD_LETTER_FORMAT

    def to_bytes(self) -> bytes:
        document = asdict(self)
        document["payload"] = base64.b64encode(self.payload).decode("ascii")
        return json.dumps(document, sort_keys=True).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> DeadLetter:
        """A dead letter back from its stored form; ``ValueError`` if it is not one."""
        try:
            document = json.loads(data)
            document["payload"] = base64.b64decode(document["payload"])
            return cls(**document)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a dead letter: {exc}") from exc


@dataclass(frozen=True, kw_only=True)
class DeadLetterPolicy(Generic[T]):
    """Retry, then park (see the module doc).

    Attributes:
        writer: writes the dead letters (a ``BytesSerializer`` writer of the dead-letter
            stream).
        max_attempts: handler calls per event before it is parked (default 3; >= 1).
        backoff: seconds before the second attempt, doubled for each next one (default 0.1).
        max_backoff: the longest wait between two attempts (default 5.0).
        write_timeout: seconds to wait for a dead letter's acknowledgement (default 30).
        clock, rng: injected time and jitter (tests).
    """

    writer: EventStreamWriter[bytes]
    max_attempts: int = 3
    backoff: float = 0.1
    max_backoff: float = 5.0
    write_timeout: float = 30.0
    clock: Clock = SYSTEM_CLOCK
    rng: random.Random | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidConfigError(f"max_attempts must be >= 1: {self.max_attempts}")
        if not 0 <= self.backoff <= self.max_backoff:
            raise InvalidConfigError("backoff must be >= 0 and <= max_backoff")
        if self.write_timeout <= 0:
            raise InvalidConfigError(f"write_timeout must be > 0: {self.write_timeout}")

    def wrap(self, handler: Callable[[EventRead[T]], Any]) -> Callable[[EventRead[T]], Any]:
        """``handler`` with this policy around it (for ``run``)."""
        rng = self.rng or random.Random()  # noqa: S311 (backoff jitter, not secrets)

        def handle(event: EventRead[T]) -> Any:
            delay = self.backoff
            for attempt in range(1, self.max_attempts + 1):
                try:
                    return handler(event)
                except Exception as exc:
                    if attempt == self.max_attempts:
                        self._park(event, attempt, exc)
                        return None
                    self.clock.sleep(rng.uniform(delay / 2, delay))
                    delay = min(self.max_backoff, delay * 2)
            return None  # (not reached: the last attempt returns or parks)

        return handle

    def _park(self, event: EventRead[T], attempts: int, exc: Exception) -> None:
        letter = DeadLetter(
            stream=event.stream or "",
            segment=event.segment if event.segment is not None else -1,
            offset=event.offset if event.offset is not None else -1,
            routing_key=event.routing_key,
            fencing_token=event.fencing_token,
            attempts=attempts,
            error_type=type(exc).__name__,
            error=str(exc),
            traceback="".join(traceback.format_exception(exc))[-4000:],
            payload=event.payload or b"",
        )
        try:
            self.writer.write_event(
                letter.to_bytes(), routing_key=event.routing_key, headers=_headers_of(event)
            ).result(self.write_timeout)
        except Exception as write_error:
            raise DeadLetterError(
                f"{letter.stream} segment {letter.segment} offset {letter.offset}: the handler "
                f"failed {attempts} times ({letter.error_type}: {letter.error}) and the dead "
                f"letter could not be written: {write_error!r}"
            ) from exc
        logger.warning(
            "%s segment %d offset %d failed %d times; parked as a dead letter",
            letter.stream,
            letter.segment,
            letter.offset,
            attempts,
            exc_info=exc,
        )


def _headers_of(event: EventRead[Any]) -> Mapping[str, bytes]:
    """The parked event's headers, which its letter keeps (as Kafka Connect's dead-letter
    queue does); none if they cannot be decoded (not written by this library)."""
    try:
        return event.headers
    except ValueError as exc:  # a SerializationError naming the event
        logger.warning(
            "%s segment %s offset %s: its headers cannot be decoded; parked without them",
            event.stream,
            event.segment,
            event.offset,
            exc_info=exc,
        )
        return {}
