"""A lease: one in-flight slot on one deployment, given back exactly once."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from routing.deployment import Deployment
from routing.outcome import AttemptReport

_frozen = attrs.setters.frozen


@attrs.define(eq=False)
class Lease:
    """One in-flight slot on one deployment, from `Router.acquire` until `release`.

    Release it in a ``finally`` with the attempt's outcome; the first release
    frees the slot and feeds routing state, later ones change nothing.

    Attributes:
        deployment: the deployment the slot belongs to.
        acquired_at: the router clock's time of acquisition.
        trial: True when this attempt is the half-open trial after a cooldown.
    """

    deployment: Deployment = attrs.field(on_setattr=_frozen)
    acquired_at: float = attrs.field(on_setattr=_frozen)
    trial: bool = attrs.field(on_setattr=_frozen)
    _apply: Callable[[AttemptReport], None] = attrs.field(repr=False, on_setattr=_frozen)
    _released: bool = attrs.field(default=False, init=False)

    @property
    def released(self) -> bool:
        """True once `release` has been called."""
        return self._released

    def release(self, report: AttemptReport) -> bool:
        """Give the slot back with the attempt's outcome.

        Returns:
            True for the first call, which applies ``report``; False for any later
            call, which changes nothing.
        """
        if self._released:
            return False
        self._released = True
        self._apply(report)
        return True
