"""What replicas write to Redis: their load reports and the cooldowns they start.

Both travel as JSON. Times on the wire are wall-clock seconds (`time.time`),
the one clock replicas share; each replica converts them to its router clock.

Keys and channel (every name starts with ``hopbase:``):

- ``hopbase:replica:<replica id>``: that replica's `LoadReport`, rewritten every
  sync interval with an expiry of one lease, so a replica that dies stops counting
  one lease after its last report;
- ``hopbase:cooldowns``: the pub/sub channel on which a replica announces each
  cooldown it starts (`CooldownNotice`);
- ``hopbase:cooldown:<deployment id>:<replica id>``: the same notice, expiring
  when the cooldown ends, for replicas that start or reconnect later.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
import orjson

from routing import Load, SpeedEstimate

REPLICA_PREFIX = "hopbase:replica:"
COOLDOWN_PREFIX = "hopbase:cooldown:"
COOLDOWN_CHANNEL = "hopbase:cooldowns"


class WireError(ValueError):
    """A value read from Redis is not what a HopBase replica writes."""


def replica_key(replica_id: str) -> str:
    """The key holding a replica's load report."""
    return REPLICA_PREFIX + replica_id


def cooldown_key(deployment_id: str, replica_id: str) -> str:
    """The key holding a cooldown a replica started on a deployment."""
    return f"{COOLDOWN_PREFIX}{deployment_id}:{replica_id}"


@attrs.frozen
class CooldownNotice:
    """A cooldown one replica started, as the others learn of it.

    Attributes:
        replica: the id of the replica that started it.
        deployment: the id of the deployment cooling down.
        until: when it ends, in wall-clock seconds.
        reason: ``failures``, ``rate_limited``, ``auth`` or ``trial_failed``.
        consecutive: cooldowns in a row, this one included.
    """

    replica: str
    deployment: str
    until: float
    reason: str
    consecutive: int

    def encode(self) -> bytes:
        """The notice as JSON bytes."""
        return orjson.dumps(attrs.asdict(self))

    @classmethod
    def decode(cls, raw: bytes | str) -> CooldownNotice:
        """The notice in ``raw``.

        Raises:
            WireError: ``raw`` is not a notice.
        """
        data = _object(raw)
        try:
            notice = cls(
                replica=_text(data["replica"]),
                deployment=_text(data["deployment"]),
                until=_number(data["until"]),
                reason=_text(data["reason"]),
                consecutive=int(_number(data["consecutive"])),
            )
        except KeyError as error:
            raise WireError(f"cooldown notice without {error}") from None
        return notice


@attrs.frozen
class LoadReport:
    """One replica's own load and fresh estimates of each deployment it routes to."""

    loads: Mapping[str, Load]
    estimates: Mapping[str, SpeedEstimate]

    def encode(self) -> bytes:
        """The report as JSON bytes: ``{deployment id: {load and estimate fields}}``."""
        return orjson.dumps({
            deployment_id: {**attrs.asdict(load),
                            **attrs.asdict(self.estimates.get(deployment_id, SpeedEstimate()))}
            for deployment_id, load in self.loads.items()
        })

    @classmethod
    def decode(cls, raw: bytes | str) -> LoadReport:
        """The report in ``raw``.

        Raises:
            WireError: ``raw`` is not a report.
        """
        loads: dict[str, Load] = {}
        estimates: dict[str, SpeedEstimate] = {}
        for deployment_id, fields in _object(raw).items():
            if not isinstance(fields, dict):
                raise WireError(f"load report entry {deployment_id!r} is not an object")
            try:
                loads[deployment_id] = Load(
                    in_flight=int(_number(fields["in_flight"])),
                    rpm=int(_number(fields["rpm"])),
                    tpm=int(_number(fields["tpm"])),
                    failures_in_window=int(_number(fields["failures_in_window"])),
                )
            except KeyError as error:
                raise WireError(f"load report entry without {error}") from None
            estimates[deployment_id] = SpeedEstimate(
                first_output_s=_optional_number(fields.get("first_output_s")),
                tokens_per_s=_optional_number(fields.get("tokens_per_s")),
            )
        return cls(loads, estimates)


def _object(raw: bytes | str) -> dict[str, object]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise WireError(f"not JSON: {error.msg}") from None
    if not isinstance(data, dict):
        raise WireError("not a JSON object")
    return data


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise WireError(f"expected a non-empty string, got {value!r}")
    return value


def _number(value: object) -> float:
    # bool is an int subclass, but a flag where a count belongs is a writer's bug
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise WireError(f"expected a number >= 0, got {value!r}")
    return float(value)


def _optional_number(value: object) -> float | None:
    return None if value is None else _number(value)
