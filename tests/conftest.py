"""Fixtures every test gets (helpers live in tests/helpers/)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import settings

# No per-example deadline: `make test` runs two pytest processes on two cores beside
# trainers in subprocesses, and an example's time then says more about the neighbours than
# about the code.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from torch's seed 0. Imports no torch: the analysis tests run in
    an environment without it (tests/analysis/conftest.py); a module that uses torch has
    loaded it by the time its tests run."""
    if (torch := sys.modules.get("torch")) is not None:
        torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_wandb_login_left_behind():
    """Each test starts logged out of W&B, as a new process does: ``wandb.init`` with a key
    logs the whole process in, and a later test asking "is a key configured?" would see it."""
    yield
    if "wandb" in sys.modules:
        try:
            from wandb.sdk.lib.wbauth.authenticate import unauthenticate_session
        except ImportError:  # an older wandb keeps no session login
            return
        unauthenticate_session()
