"""The user guide says what the code does: every config key documented with its default,
every profile key, and every command in the README a valid command line."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from pydantic import BaseModel

from vitscale.config import Config, yaml_load
from vitscale.grid.profile import Profile

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DOC = (ROOT / "docs" / "config.md").read_text()


def _schema(cls, prefix=""):
    for name, f in cls.model_fields.items():  # pydantic models (vitscale.config.schema)
        default = f.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            yield from _schema(type(default), f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", default


def _documented() -> dict[str, str]:
    rows = re.findall(r"^\| `([a-z0-9_.]+)` \| `([^`]*)` \|", CONFIG_DOC, flags=re.M)
    return dict(rows)


def test_every_config_key_is_documented_with_its_default():
    documented = _documented()
    schema = dict(_schema(Config))
    assert set(documented) == set(schema)
    for key, default in schema.items():
        assert yaml_load(documented[key]) == default, key


def test_every_profile_key_is_documented():
    # name: the file's; calibration: read from calibration.csv beside it, not a key
    keys = {f.name for f in dataclasses.fields(Profile)} - {"name", "calibration"}
    section = CONFIG_DOC.split("## Cluster profiles")[1]
    assert keys == set(re.findall(r"`([a-z_]+)`", section.split("\n\n", 1)[1]))
