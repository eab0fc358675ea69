"""Writing views to a W&B server: the grid's saved workspace and its report, each one
upsert after :func:`vitscale.record.wandb.open_project` has checked the key, the network
and the project (a workspace view is created, or updated in place when the grid's view
exists: its name is derived from entity, project and group; a report is saved after its
assets run has been uploaded).
"""

from __future__ import annotations

import hashlib

from ..record.wandb import graphql, translated_errors

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
        found = graphql(
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
