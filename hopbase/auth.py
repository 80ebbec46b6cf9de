"""Client and admin keys: who may call HopBase.

Keys are kept only as SHA-256 digests and compared with `hmac.compare_digest`
against every configured digest, so neither timing nor memory dumps reveal a key.
A request's key comes from ``Authorization: Bearer KEY`` or ``x-api-key: KEY``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

import attrs

from hopbase import errors
from hopbase.config import Config
from routing.window import SlidingWindow


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request carries, or None."""
    authorization = headers.get("Authorization")
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return headers.get("x-api-key") or None


@attrs.frozen
class KeyRing:
    """The client keys (name by digest) and the admin key digest."""

    clients: tuple[tuple[bytes, str], ...] = attrs.field(repr=False)
    admin: bytes | None = attrs.field(repr=False)
    metrics: bytes | None = attrs.field(repr=False)
    open_access: bool = False
    metrics_required: bool = False

    @classmethod
    def from_config(cls, config: Config) -> KeyRing:
        """Keys listed whose variables are unset refuse everyone: never fail open."""
        return cls(
            clients=tuple((_digest(key.secret.value), key.name) for key in config.client_keys),
            admin=_digest(config.admin_key.value) if config.admin_key else None,
            metrics=_digest(config.metrics_key.value) if config.metrics_key else None,
            open_access=config.open_access,
            metrics_required=config.server.metrics_key_env is not None,
        )

    def client(self, headers: Mapping[str, str]) -> str | None:
        """The name of the calling client key; None under open access.

        Raises:
            errors.Unauthorized: a key is required and is missing or unknown.
        """
        if self.open_access:
            return None
        key = presented_key(headers)
        if key is None:
            raise errors.Unauthorized("missing API key: send Authorization: Bearer <key>")
        digest = _digest(key)
        name = None
        for known, known_name in self.clients:
            if hmac.compare_digest(known, digest):
                name = known_name
        if name is None:
            raise errors.Unauthorized("invalid API key")
        return name

    def check_admin(self, headers: Mapping[str, str]) -> None:
        """Raises Unauthorized without a key, Forbidden with any key but the admin key."""
        key = presented_key(headers)
        if key is None:
            raise errors.Unauthorized("missing admin key")
        if self.admin is None or not hmac.compare_digest(self.admin, _digest(key)):
            raise errors.Forbidden("this key may not use /admin")

    def check_metrics(self, headers: Mapping[str, str]) -> None:
        if not self.metrics_required:
            return
        key = presented_key(headers)
        if (
            key is None
            or self.metrics is None
            or not hmac.compare_digest(self.metrics, _digest(key))
        ):
            raise errors.Unauthorized("metrics key required")


@attrs.define
class ClientLimiter:
    """Per-client-key request-per-minute ceilings (``auth.keys[].rpm``), sliding windows."""

    _limits: dict[str, int] = attrs.field(factory=dict)
    _windows: dict[str, SlidingWindow] = attrs.field(factory=dict)

    def configure(self, config: Config) -> None:
        """Take the ceilings of ``config``; windows of surviving keys keep their counts."""
        self._limits = {key.name: key.rpm for key in config.client_keys if key.rpm}

    def admit(self, name: str | None, now: float) -> None:
        """Count one request of key ``name``.

        Raises:
            errors.RateLimited: the key is at its rpm ceiling (with seconds to wait).
        """
        limit = self._limits.get(name) if name is not None else None
        if limit is None or name is None:
            return
        window = self._windows.get(name)
        if window is None:
            window = self._windows[name] = SlidingWindow()
        if window.total(now) >= limit:
            wait = window.seconds_until_at_most(limit - 1, now) or 1.0
            raise errors.RateLimited(
                f"key {name!r} is over its limit of {limit} requests per minute",
                retry_after_s=wait,
            )
        window.add(now, 1)
