"""Everything that talks to a W&B server, with one clear error per way it can fail.

Before anything is written to W&B, :func:`open_project` checks, in order, that

1. an API key is configured for the server (``WANDB_API_KEY``, ``wandb login``'s netrc),
   without ever prompting for one;
2. the server answers at all (a TCP connection to ``WANDB_BASE_URL`` or api.wandb.ai,
   unless a proxy is configured): "no network" is told apart from "bad key";
3. the server accepts the key;
4. the entity and project exist and the key can see them;
5. (when asked) the grid's group has runs.

Each failure is a :class:`WandbError`: one line, the key itself never in it
(:func:`redact`). The writes are single calls: a workspace view is one upsert (created,
or updated in place when the grid's view exists: its name is derived from entity,
project and group), a report is one upsert after its assets run has been uploaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import netrc
import os
import re
import socket
from collections.abc import Iterator
from urllib.parse import urlparse

__all__ = [
    "WandbError",
    "DEFAULT_BASE_URL",
    "base_url",
    "redact",
    "has_api_key",
    "check_reachable",
    "open_api",
    "open_project",
    "translated_errors",
    "view_name",
    "save_workspace",
    "publish_report",
]

DEFAULT_BASE_URL = "https://api.wandb.ai"
TIMEOUT_S = 20


class WandbError(ValueError):
    """W&B cannot be used for this command (no key, no network, no project, no runs)."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(" ".join(str(message).split())))


def base_url() -> str:
    """The W&B server: ``WANDB_BASE_URL``, else wandb's settings, else api.wandb.ai."""
    url = os.environ.get("WANDB_BASE_URL")
    if not url:
        try:
            from wandb.sdk import wandb_setup

            url = wandb_setup.singleton().settings.base_url
        except Exception:  # noqa: BLE001 - a wandb without this layout: use the default
            url = None
    return (url or DEFAULT_BASE_URL).rstrip("/")


def _netrc_key(host: str) -> str | None:
    try:
        auth = netrc.netrc(os.environ.get("NETRC")).authenticators(host)
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return None
    return auth[2] if auth else None


def _secrets() -> list[str]:
    host = urlparse(base_url()).netloc  # wandb's netrc machine: host[:port]
    found = [os.environ.get("WANDB_API_KEY"), _netrc_key(host), _netrc_key("api.wandb.ai")]
    return [s for s in found if s and len(s) >= 8]


# W&B API keys: 40 hex digits, with a "local-" (or other) prefix on self-hosted servers.
_KEY_PATTERN = re.compile(r"\b(?:[A-Za-z0-9]+-)?[0-9a-f]{40}\b")


def redact(text: str) -> str:
    """``text`` with every configured API key (and anything shaped like one) as ``***``."""
    for secret in _secrets():
        text = text.replace(secret, "***")
    return _KEY_PATTERN.sub("***", text)


def has_api_key(url: str | None = None) -> bool:
    """Whether a key is configured for the server, as wandb finds it, never prompting."""
    url = url or base_url()
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        from wandb.sdk.lib.wbauth import authenticate_session

        return (
            authenticate_session(host=url, source="vitscale", prompt=False, update_session=False)
            is not None
        )
    except ImportError:  # an older wandb: its keys live in the netrc
        return _netrc_key(urlparse(url).netloc) is not None
    except Exception as e:  # noqa: BLE001 - a malformed key file
        raise WandbError(f"cannot read the W&B credentials for {url}: {e}") from None


def check_reachable(url: str | None = None, *, timeout: float = 5.0) -> None:
    """Open (and close) a TCP connection to the server; a proxy, if set, is trusted."""
    url = url or base_url()
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")):
        return
    parsed = urlparse(url)
    host = parsed.hostname
    if not host:
        raise WandbError(f"W&B server URL {url!r} has no host name (check WANDB_BASE_URL)")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except socket.gaierror:
        reason = f"cannot resolve {host}"
    except (ConnectionRefusedError, TimeoutError, OSError) as e:
        reason = getattr(e, "strerror", None) or type(e).__name__
    else:
        return
    raise WandbError(
        f"cannot reach the W&B server at {url} ({reason}): check the network, or "
        "WANDB_BASE_URL for a self-hosted server; offline runs upload later with "
        "`vitscale wandb sync RUNS`"
    )


@contextlib.contextmanager
def translated_errors(url: str | None = None, what: str = "W&B request") -> Iterator[None]:
    """Turn wandb's (and its transport's) errors into one-line :class:`WandbError`."""
    try:
        yield
    except WandbError:
        raise
    except Exception as e:  # noqa: BLE001 - anything the client raises becomes one message
        url = url or base_url()
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        name = type(e).__name__
        if name == "AuthenticationError" and "did not respond" not in message:
            raise WandbError(
                f"the W&B server at {url} rejected the API key: run `wandb login --relogin` "
                "or set WANDB_API_KEY"
            ) from None
        if "did not respond" in message or "timed out" in message.lower():
            raise WandbError(f"{what}: the W&B server at {url} did not answer in time") from None
        if name == "UsageError":
            raise WandbError(f"{what}: {message}") from None
        raise WandbError(f"{what} to {url} failed: {message}") from None


def open_api(*, timeout: int = TIMEOUT_S):
    """A checked ``wandb.Api``: key configured, server reachable, key accepted."""
    url = base_url()
    if not has_api_key(url):
        raise WandbError(
            f"no W&B API key for {url}: run `wandb login` or set WANDB_API_KEY "
            "(or use --dry-run to see what would be sent)"
        )
    check_reachable(url)
    import wandb

    with translated_errors(url, "W&B login"):
        return wandb.Api(timeout=timeout)


def _graphql(api, query: str, variables: dict):
    from wandb_workspaces._graphql import execute_graphql

    return execute_graphql(api, query, variables)


_PROJECT = """
query VitscaleProject($entity: String!, $project: String!) {
  project(name: $project, entityName: $entity) { id }
}
"""


def open_project(entity: str, project: str, *, group: str | None = None, timeout: int = TIMEOUT_S):
    """:func:`open_api`, then the project must exist and, with ``group``, hold its runs."""
    api = open_api(timeout=timeout)
    with translated_errors(what=f"looking up W&B project {entity}/{project}"):
        found = (_graphql(api, _PROJECT, {"entity": entity, "project": project}) or {}).get(
            "project"
        )
    if not found:
        raise WandbError(
            f"W&B project {entity}/{project} not found, or this API key cannot see it "
            "(check --entity and --project)"
        )
    if group is not None:
        with translated_errors(what=f"listing the runs of group {group!r}"):
            runs = api.runs(f"{entity}/{project}", filters={"group": group}, per_page=1)
            count = len(runs)
        if count == 0:
            raise WandbError(
                f"W&B project {entity}/{project} has no runs in group {group!r}: check the "
                "grid name, or upload offline runs first with `vitscale wandb sync RUNS`"
            )
    return api


# --------------------------------------------------------------------------- workspace

_VIEW = """
query VitscaleView($entity: String, $project: String, $viewName: String) {
  project(name: $project, entityName: $entity) {
    allViews(viewType: "project-view", viewName: $viewName) { edges { node { id } } }
  }
}
"""


def view_name(entity: str, project: str, group: str) -> str:
    """The saved view's internal name: one per (entity, project, grid), so saving again
    updates the same view. W&B's shape, ``nw-<id>-v``, with an id of hex digits."""
    digest = hashlib.sha1(f"{entity}/{project}/{group}".encode()).hexdigest()[:12]
    return f"nw-vs{digest}-v"


def save_workspace(workspace, api, *, group: str) -> tuple[str, bool]:
    """Create or update the grid's view in one upsert; returns ``(url, updated)``."""
    name = view_name(workspace.entity, workspace.project, group)
    with translated_errors(what="looking up the saved workspace"):
        found = _graphql(
            api,
            _VIEW,
            {"entity": workspace.entity, "project": workspace.project, "viewName": name},
        )
    edges = (((found or {}).get("project") or {}).get("allViews") or {}).get("edges") or []
    existing = edges[0]["node"]["id"] if edges else ""
    workspace._internal_name = name
    workspace._internal_id = existing
    with translated_errors(what="saving the workspace"):
        workspace.save()
        url = workspace.url
    return url, bool(existing)


# --------------------------------------------------------------------------- report


def _finished_run(api, path: str) -> bool:
    try:
        return api.run(path).state == "finished"
    except Exception:  # noqa: BLE001 - not found (or not readable): upload it
        return False


def publish_report(report, assets, api, *, directory) -> tuple[str, bool]:
    """Upload the assets run (unless this content is already there), then save the
    report in one upsert, updating the project's report of the same title if there is
    one; returns ``(url, updated)``."""
    from .report import log_assets

    entity, project = report.entity, report.project
    if not _finished_run(api, f"{entity}/{project}/{assets.run_id}"):
        with translated_errors(what="uploading the report's figures and table"):
            log_assets(assets, entity=entity, project=project, mode="online", directory=directory)
    with translated_errors(what="looking up the report"):
        old = next(
            (r for r in api.reports(f"{entity}/{project}") if r.display_name == report.title),
            None,
        )
    if old is not None:
        report.id = old.id
    with translated_errors(what="saving the report"):
        report.save()
        url = report.url
    return url, old is not None
