"""``python -m simulator ...``: the same as the ``clustersim`` command."""

import sys

from .cli.main import main

sys.exit(main())
