"""A cell's W&B run as the record's mirror: connecting to the server, the names a run is
given, and the W&B mode a run uses.

One W&B run per cell (docs/design.md, "The run folder"); its summary also holds, from
the start of the run, the model's :func:`identity` for the run table.

Reading from a server goes through :func:`open_api` / :func:`open_project`, which check
in turn the key (never prompting for one), the network (so that "no network" is told apart
from "bad key"), the key's acceptance, the project and, asked, the grid's runs. Each
failure is a :class:`WandbError`: one line, the key itself never in it (:func:`redact`).
``wandb`` itself is imported only inside the functions that call it.
"""

from __future__ import annotations

import contextlib
import netrc
import os
import re
import socket
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

from ..catalog import model_columns
from ..errors import UserError

IDENTITY = ("family", "size", "patch")  # summary keys set when the run starts
# Beside an online run's ``run-<id>.wandb`` when its upload did not finish (the server
# stopped answering): `vitscale wandb sync` uploads such runs as it does offline ones.
UPLOAD_UNFINISHED = "upload-unfinished"
# Seconds an online run's end waits for its upload (wandb's ``finish_timeout``); the
# environment variable overrides it. Training is over by then: waiting longer only
# holds the GPU.
FINISH_TIMEOUT_ENV = "VITSCALE_WANDB_FINISH_TIMEOUT"
FINISH_TIMEOUT_S = 120.0

DEFAULT_BASE_URL = "https://api.wandb.ai"
TIMEOUT_S = 20


class WandbError(UserError, ValueError):
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


def _default_base_url() -> str:
    """The server wandb itself defaults to (its settings' default; api.wandb.ai in older
    releases, W&B's CoreWeave address in newer ones)."""
    try:
        from wandb.sdk.wandb_settings import Settings

        return str(Settings.model_fields["base_url"].default or DEFAULT_BASE_URL).rstrip("/")
    except Exception:  # noqa: BLE001 - a wandb without this layout
        return DEFAULT_BASE_URL


def server(url: str) -> str:
    """The server as messages name it; wandb's default one said to be so: a user who never
    set a server is puzzled by an address they never typed."""
    if url.rstrip("/") in (DEFAULT_BASE_URL, _default_base_url()):
        return f"{url} (W&B's cloud: wandb's default server, as WANDB_BASE_URL is not set)"
    return url


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
        raise WandbError(f"cannot read the W&B credentials for {server(url)}: {e}") from None


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
        f"cannot reach the W&B server at {server(url)} ({reason}): check the network, or "
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
                f"the W&B server at {server(url)} rejected the API key: run `wandb login --relogin` "
                "or set WANDB_API_KEY"
            ) from None
        if "did not respond" in message or "timed out" in message.lower():
            raise WandbError(
                f"{what}: the W&B server at {server(url)} did not answer in time"
            ) from None
        if name == "UsageError":
            raise WandbError(f"{what}: {message}") from None
        raise WandbError(f"{what} to {server(url)} failed: {message}") from None


def open_api(*, timeout: int = TIMEOUT_S):
    """A checked ``wandb.Api``: key configured, server reachable, key accepted."""
    url = base_url()
    if not has_api_key(url):
        raise WandbError(
            f"no W&B API key for {server(url)}: run `wandb login` or set WANDB_API_KEY "
            "(or use --dry-run to see what would be sent)"
        )
    check_reachable(url)
    import wandb

    with translated_errors(url, "W&B login"):
        return wandb.Api(timeout=timeout)


def graphql(api, query: str, variables: dict):
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
        found = (graphql(api, _PROJECT, {"entity": entity, "project": project}) or {}).get(
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


def _key_configured() -> bool:
    try:
        return has_api_key()
    except Exception:  # noqa: BLE001 - an unreadable key file: run offline
        return False


def wandb_mode(configured: str) -> str:
    """Resolve ``auto``: ``WANDB_MODE`` if set, else online with an API key, else offline."""
    if configured != "auto":
        return configured
    env = os.environ.get("WANDB_MODE")
    if env in ("online", "offline", "disabled"):
        return env
    return "online" if _key_configured() else "offline"


# --------------------------------------------------------------------------- names


def identity(model: str) -> dict[str, Any]:
    """``family``, ``size`` and ``patch`` of a model name, as the analysis frames have them
    (:func:`vitscale.catalog.model_columns`); ``patch`` only where the model has one: the
    summary keys a cell's W&B run holds from its start, for the run table."""
    return {k: v for k, v in zip(IDENTITY, model_columns(model), strict=True) if v is not None}


def run_name(config: Mapping[str, Any], cell_id: str) -> str:
    """A cell's W&B display name, what chart legends show: model, subset, seed when it is
    not 0, and the cell id (the run id) so it stays unique: ``ViT-B/16 30M 1a2b3c4d5e``."""
    parts = [str(config["model"]["name"])]
    subset = (config.get("data") or {}).get("subset")
    if subset is not None:
        parts.append(str(subset))
    if config.get("seed"):
        parts.append(f"seed {config['seed']}")
    return " ".join([*parts, cell_id])
