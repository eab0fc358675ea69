"""``python -m vitscale.cli``: the ``vitscale`` command."""

import sys

from . import main

sys.exit(main())
