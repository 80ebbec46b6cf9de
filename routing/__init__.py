"""Routing policy for HopBase: pure and synchronous, no I/O, clock and randomness injected.

`Router.acquire` picks an eligible deployment of a model group by the group's
strategy and returns a `Lease`; releasing the lease with an `AttemptReport`
feeds the deployment's estimates, failure window and cooldown.
"""

from routing.budget import RetryBudget
from routing.clock import Clock, FakeClock, SystemClock
from routing.deployment import Deployment, DeploymentSnapshot, DeploymentState
from routing.lease import Lease
from routing.outcome import AttemptReport, Outcome
from routing.policy import STRATEGY_NAMES, CooldownSettings, GroupPolicy
from routing.remote import Load, SpeedEstimate
from routing.router import AllCoolingDown, CooldownStarted, NoCapacity, Router

__all__ = [
    "STRATEGY_NAMES",
    "AllCoolingDown",
    "AttemptReport",
    "Clock",
    "CooldownSettings",
    "CooldownStarted",
    "Deployment",
    "DeploymentSnapshot",
    "DeploymentState",
    "FakeClock",
    "GroupPolicy",
    "Lease",
    "Load",
    "NoCapacity",
    "Outcome",
    "RetryBudget",
    "Router",
    "SpeedEstimate",
    "SystemClock",
]
