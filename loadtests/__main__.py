"""``python -m loadtests``: see loadtests/README.md or ``python -m loadtests --help``."""

import sys

from loadtests.cli import main

sys.exit(main())
