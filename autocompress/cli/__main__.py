"""``python -m autocompress.cli``: the same as the ``acc`` command (used under ``torchrun``)."""

import sys

from autocompress.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
