"""`python -m toolserve.cli`: the `toolserve` command."""

import sys

from toolserve.cli import main

sys.exit(main())
