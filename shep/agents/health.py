"""``shep doctor``'s check of the configured agent CLI: installed, and of a verified version.

The versions shep's flags and parsers were verified against are each agent's
``AgentSpec.verified_version`` (the one list; ``.ci/install-agent-clis`` installs
the same ones, and a test holds the two together). The binary is untrusted: its
``--version`` runs under ``probe_version``'s timeout and bounds.
"""

from __future__ import annotations

from pathlib import Path
from shutil import which
from typing import TYPE_CHECKING

from events.errors import AgentError, ShepError
from events.versions import version_key
from shep.agents.registry import AGENT_SPECS, probe_version
from shep.home.doctor import Check
from shep.home.secrets import load_token, secrets_path

if TYPE_CHECKING:
    from events.settings import AgentConfigured

#: Seconds an agent CLI's ``--version`` may take before doctor gives up on it.
VERSION_TIMEOUT = 10.0


def check_agent(
    configured: AgentConfigured | ShepError | None, home: Path, *, timeout: float = VERSION_TIMEOUT
) -> Check:
    """Whether the agent this home is set up with can run: installed, answering, of the
    version shep was verified with (older: ``fail``; newer or unverified: ``warn``)."""
    if isinstance(configured, ShepError):
        return Check("agent", "fail", f"cannot read the agent setting: {configured}")
    if configured is None:
        return Check(
            "agent",
            "fail",
            "no agent configured",
            "Choose one: shep settings agent (or try shep with: shep settings agent --agent demo)",
        )
    spec = AGENT_SPECS.get(configured.agent_type)
    name = configured.agent_type
    if spec is None:
        return Check(
            "agent",
            "fail",
            f"{name}: an agent type this shep does not know",
            "Choose one it knows: shep settings agent",
        )
    data: dict[str, object] = {
        "type": name,
        "verified_version": spec.verified_version,
        "configured_version": configured.binary_version,
    }
    if not spec.binary:
        return Check("agent", "ok", f"{name}: built in, nothing to install", data=data)
    executable = configured.binary or spec.binary
    data["binary"] = which(executable) or executable
    if configured.token_configured and load_token(home, name) is None:
        return Check(
            "agent",
            "fail",
            f"{name} is set up with an API token, but {secrets_path(home)} holds none for it",
            f"Store it here: shep settings agent --agent {name} --auth token --token-stdin",
            data,
        )
    try:
        version = probe_version(name, configured.binary, timeout=timeout)
    except AgentError as e:
        return Check("agent", "fail", str(e), data=data)
    data["version"] = version
    found = f"{name} {version} ({data['binary']})"
    verified = spec.verified_version
    if not spec.verified or verified is None:
        return Check(
            "agent",
            "warn",
            f"{found}; shep's support for it is not verified against a real one",
            data=data,
        )
    if not version[:1].isdigit():
        return Check(
            "agent",
            "warn",
            f"{found}: not a version number; shep is verified with {verified}",
            data=data,
        )
    if version_key(version) < version_key(verified):
        return Check(
            "agent",
            "fail",
            f"{found} is older than {verified}, the version shep is verified with",
            f"Upgrade it to {verified} or later: {spec.install_hint}",
            data,
        )
    if version_key(version) > version_key(verified):
        return Check(
            "agent",
            "warn",
            f"{found}; shep is verified with {verified}, not this newer one",
            data=data,
        )
    return Check("agent", "ok", f"{found}, the version shep is verified with", data=data)
