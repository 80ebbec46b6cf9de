"""The values replicas exchange through Redis, and the state section of the config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hopbase.config import load_config
from hopbase.errors import ConfigError
from hopbase.state.wire import CooldownNotice, LoadReport, WireError, cooldown_key, replica_key
from routing import Load, SpeedEstimate


def test_a_cooldown_notice_round_trips() -> None:
    notice = CooldownNotice("host:1:ab", "openai-a", 1_764_441_600.25, "rate_limited", 2)

    assert CooldownNotice.decode(notice.encode()) == notice
    assert CooldownNotice.decode(notice.encode().decode()) == notice


@pytest.mark.parametrize(("raw", "problem"), [
    (b"nope", "not JSON"),
    (b"[]", "not a JSON object"),
    (b'{"replica": "r", "deployment": "a", "until": 1.0, "reason": "auth"}',
     "without 'consecutive'"),
    (b'{"replica": "", "deployment": "a", "until": 1.0, "reason": "auth", "consecutive": 1}',
     "non-empty string"),
    (b'{"replica": "r", "deployment": "a", "until": "soon", "reason": "auth", "consecutive": 1}',
     "number"),
    (b'{"replica": "r", "deployment": "a", "until": 1.0, "reason": "auth", "consecutive": true}',
     "number"),
])
def test_a_malformed_notice_is_refused(raw: bytes, problem: str) -> None:
    with pytest.raises(WireError, match=problem):
        CooldownNotice.decode(raw)


def test_a_load_report_round_trips_with_missing_estimates_as_none() -> None:
    report = LoadReport(
        {"a": Load(in_flight=2, rpm=30, tpm=4000, failures_in_window=1), "b": Load()},
        {"a": SpeedEstimate(first_output_s=0.4, tokens_per_s=55.5)},
    )

    decoded = LoadReport.decode(report.encode())

    assert decoded.loads == report.loads
    assert decoded.estimates == {"a": SpeedEstimate(0.4, 55.5), "b": SpeedEstimate()}


@pytest.mark.parametrize(("raw", "problem"), [
    (b'{"a": 3}', "not an object"),
    (b'{"a": {"in_flight": 1, "rpm": 0, "tpm": 0}}', "without 'failures_in_window'"),
    (b'{"a": {"in_flight": -1, "rpm": 0, "tpm": 0, "failures_in_window": 0}}', "number >= 0"),
])
def test_a_malformed_report_is_refused(raw: bytes, problem: str) -> None:
    with pytest.raises(WireError, match=problem):
        LoadReport.decode(raw)


def test_keys_name_the_replica_and_the_deployment() -> None:
    assert replica_key("h:1:ab") == "hopbase:replica:h:1:ab"
    assert cooldown_key("openai-a", "h:1:ab") == "hopbase:cooldown:openai-a:h:1:ab"


def write(tmp_path: Path, state: dict[str, object]) -> Path:
    document = {"models": {"m": {"deployments": [{"id": "s", "provider": "simulated"}]}},
                "state": state, "logs": {"path": str(tmp_path / "log.db")}}
    path = tmp_path / "deployments.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_the_state_section_sets_the_sync_interval_and_the_lease(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, {"backend": "redis", "sync_interval_s": 0.5,
                                          "lease_s": 5}))
    defaults = load_config(write(tmp_path, {}))

    assert (config.state.backend, config.state.sync_interval_s, config.state.lease_s) == (
        "redis", 0.5, 5.0)
    assert (defaults.state.backend, defaults.state.sync_interval_s, defaults.state.lease_s) == (
        "memory", 0.2, 3.0)


def test_the_sync_interval_and_the_lease_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, {"sync_interval_s": 0, "lease_s": -1}))

    assert raised.value.problems == [
        "state.sync_interval_s: must be > 0",
        "state.lease_s: must be > 0",
    ]
