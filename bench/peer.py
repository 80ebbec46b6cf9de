"""The optional peer gateway: LiteLLM's proxy in its own venv, set up like HopBase.

``python -m bench --peer litellm`` (``make bench PEER=litellm``) installs
``litellm[proxy]`` from PyPI into ``bench/.peer-litellm/`` (git-ignored) the
first time, then runs it on HopBase's core with one worker, two deployments of
each mock model on the mock, latency-based routing and a master key; no
database, no callbacks, telemetry off, and the model cost map read from the
installed package rather than fetched from GitHub.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

NAMES = ("litellm",)
VENV = Path(__file__).with_name(".peer-litellm")
PACKAGE = "litellm[proxy]"
MASTER_KEY = "sk-bench-litellm-master"
READY_PATH = "/health/liveliness"
START_TIMEOUT_S = 120.0
INSTALL_TIMEOUT_S = 1200.0
# Any of these makes LiteLLM's proxy connect to (and migrate) a database.
UNSET_ENVIRONMENT = ("DATABASE_URL", "DIRECT_URL")
_MODELS = ("chat", "burst", "slow")
_INSTALLED_MARKER = ".bench-installed"
_HEARTBEAT_S = 15.0


def litellm_config(mock_port: int, master_key: str = MASTER_KEY) -> dict[str, object]:
    """LiteLLM's config.yaml: each mock model as two deployments on the mock, as HopBase's.

    The deployments get explicit ids: LiteLLM derives a missing id from a hash of
    the parameters, and two identical entries would then be one deployment.
    """
    api_base = f"http://127.0.0.1:{mock_port}/v1"

    def deployment(model: str, letter: str) -> dict[str, object]:
        return {
            "model_name": model,
            "litellm_params": {"model": f"openai/{model}", "api_base": api_base,
                               "api_key": "dummy"},
            "model_info": {"id": f"{model}-{letter}"},
        }

    return {
        "model_list": [deployment(model, letter) for model in _MODELS for letter in "ab"],
        "router_settings": {"routing_strategy": "latency-based-routing"},
        "general_settings": {"master_key": master_key},
        "litellm_settings": {"callbacks": [], "success_callback": [], "failure_callback": []},
    }


def environment() -> dict[str, str]:
    """The variables LiteLLM runs with: telemetry off, no network at start, quiet logs."""
    return {
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "PYTHONUNBUFFERED": "1",
    }


def command(config_path: Path, port: int, venv: Path = VENV) -> list[str]:
    """The command that serves LiteLLM's proxy on loopback ``port`` with one worker."""
    return [str(venv / "bin" / "litellm"), "--config", str(config_path), "--host", "127.0.0.1",
            "--port", str(port), "--num_workers", "1"]


def installed_version(venv: Path = VENV) -> str | None:
    """The LiteLLM version of a completed install in ``venv``, None when there is none."""
    marker = venv / _INSTALLED_MARKER
    if not marker.exists() or not (venv / "bin" / "litellm").exists():
        return None
    return marker.read_text().strip() or None


def install(progress: Callable[[str], None], venv: Path = VENV,
            timeout_s: float = INSTALL_TIMEOUT_S) -> str:
    """Install ``litellm[proxy]`` into ``venv`` unless it is there; return its version.

    Raises:
        RuntimeError: the venv or the install failed or ran over ``timeout_s``.
    """
    version = installed_version(venv)
    if version is not None:
        return version
    venv.mkdir(parents=True, exist_ok=True)
    log_path = venv / "bench-install.log"
    progress(f"installing {PACKAGE} into {venv} (first run only; log: {log_path}) …")
    started = time.monotonic()
    if not (venv / "bin" / "python").exists():
        _step([sys.executable, "-m", "venv", str(venv)], log_path, started, timeout_s, progress)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--progress-bar", "off",
           PACKAGE]
    _step(pip, log_path, started, timeout_s, progress)
    version = _package_version(venv)
    (venv / _INSTALLED_MARKER).write_text(version + "\n")
    progress(f"installed LiteLLM {version} in {time.monotonic() - started:.0f} s")
    return version


def _step(arguments: list[str], log_path: Path, started: float, timeout_s: float,
          progress: Callable[[str], None]) -> None:
    """Run one install command, printing a heartbeat, within the install's time budget."""
    with log_path.open("ab") as log_file:
        child = subprocess.Popen(arguments, stdout=log_file, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL)
        while True:
            left = timeout_s - (time.monotonic() - started)
            try:
                code = child.wait(max(0.1, min(_HEARTBEAT_S, left)))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() - started >= timeout_s:
                    child.kill()
                    child.wait()
                    raise RuntimeError(f"installing {PACKAGE} took over {timeout_s:.0f} s; "
                                       f"see {log_path}") from None
                progress(f"… still installing, {time.monotonic() - started:.0f} s "
                         f"({_last_line(log_path)})")
    if code != 0:
        raise RuntimeError(f"{' '.join(arguments[:4])} … failed (exit {code}):\n"
                           f"{_tail(log_path)}")


def _package_version(venv: Path) -> str:
    probe = "import importlib.metadata as m; print(m.version('litellm'))"
    done = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True,
                          text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"LiteLLM is not importable in {venv}:\n{done.stderr[-2000:]}")
    return done.stdout.strip()


def _tail(log_path: Path, lines: int = 15) -> str:
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])


def _last_line(log_path: Path) -> str:
    # pip's find-links warnings say nothing about progress: show the last real step.
    for line in reversed(log_path.read_text(errors="replace").splitlines()):
        if line.strip() and not line.startswith("WARNING"):
            return line.strip()[:100]
    return "no output yet"
