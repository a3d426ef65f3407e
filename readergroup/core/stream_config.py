"""Stream configuration: scaling policy and event size limit (frozen, validated)."""

from __future__ import annotations

from dataclasses import dataclass, field

from readergroup.core.errors import InvalidConfigError

MiB = 1024 * 1024
MAX_EVENT_SIZE_LIMIT = 8 * MiB
MAX_SEGMENTS = 10_000
"""Most active segments a stream may have: at creation, and after any scale."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScalingPolicy:
    """How many segments a stream has, and whether an
    :class:`~readergroup.admin.autoscale.AutoScaler` may change that. Build with
    :meth:`fixed` or :meth:`by_event_rate`.

    Attributes:
        kind: ``"fixed"`` or ``"by_event_rate"``.
        min_segments: segments at creation, and the floor for merges (default 1;
            1..:data:`MAX_SEGMENTS`).
        target_rate: events/s per segment above which a segment is split, and below half of
            which two neighbours are merged (``by_event_rate`` only; > 0).
        scale_factor: into how many segments a hot segment is split (default 2; 2..16).
    """

    kind: str = "fixed"
    min_segments: int = 1
    target_rate: float = 0.0
    scale_factor: int = 2

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "by_event_rate"):
            raise InvalidConfigError(
                f"scaling kind must be 'fixed' or 'by_event_rate': {self.kind!r}"
            )
        if not 1 <= self.min_segments <= MAX_SEGMENTS:
            raise InvalidConfigError(
                f"min_segments must be 1..{MAX_SEGMENTS}, got {self.min_segments}"
            )
        if self.kind == "by_event_rate" and not self.target_rate > 0:
            raise InvalidConfigError(f"target_rate must be > 0, got {self.target_rate}")
        if not 2 <= self.scale_factor <= 16:
            raise InvalidConfigError(f"scale_factor must be 2..16, got {self.scale_factor}")

    @classmethod
    def fixed(cls, segments: int) -> ScalingPolicy:
        """Exactly ``segments`` segments; only explicit ``scale_stream`` calls change that."""
        return cls(kind="fixed", min_segments=segments)

    @classmethod
    def by_event_rate(
        cls, target_rate: float, scale_factor: int = 2, min_segments: int = 1
    ) -> ScalingPolicy:
        """Split segments busier than ``target_rate`` events/s; merge quiet neighbours."""
        return cls(
            kind="by_event_rate",
            target_rate=float(target_rate),
            scale_factor=scale_factor,
            min_segments=min_segments,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RetentionPolicy:
    """What :class:`~readergroup.admin.retention.RetentionManager` may delete (see its module).

    Attributes:
        consumption_based: delete only what every subscriber has passed (default True).
        max_age_ms: data appended longer ago than this (server clock) is eligible (default None).
        max_bytes: data beyond this many bytes from the tail is eligible (default None).
    """

    consumption_based: bool = True
    max_age_ms: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.max_age_ms is not None and self.max_age_ms < 0:
            raise InvalidConfigError(f"max_age_ms must be >= 0: {self.max_age_ms}")
        if self.max_bytes is not None and self.max_bytes < 0:
            raise InvalidConfigError(f"max_bytes must be >= 0: {self.max_bytes}")
        if not self.consumption_based and self.max_age_ms is None and self.max_bytes is None:
            raise InvalidConfigError(
                "a retention policy that is not consumption based needs a limit"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamConfiguration:
    """A stream's settings.

    Attributes:
        scaling_policy: default ``ScalingPolicy.fixed(1)``.
        max_event_size: largest serialized event in bytes (default 1 MiB; 1 B to 8 MiB).
        retention: what :class:`~readergroup.admin.retention.RetentionManager` may delete
            (default None: nothing).
    """

    scaling_policy: ScalingPolicy = field(default_factory=lambda: ScalingPolicy.fixed(1))
    max_event_size: int = 1 * MiB
    retention: RetentionPolicy | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.scaling_policy, ScalingPolicy):
            raise InvalidConfigError("scaling_policy must be a ScalingPolicy")
        if self.retention is not None and not isinstance(self.retention, RetentionPolicy):
            raise InvalidConfigError("retention must be a RetentionPolicy or None")
        if not 1 <= self.max_event_size <= MAX_EVENT_SIZE_LIMIT:
            raise InvalidConfigError(
                f"max_event_size must be 1..{MAX_EVENT_SIZE_LIMIT} bytes, got {self.max_event_size}"
            )
