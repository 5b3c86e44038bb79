"""``python -m keyedstate COMMAND ...``: see :mod:`keyedstate.cli`."""

import sys

from keyedstate.cli import main

if __name__ == "__main__":
    sys.exit(main())
