"""`python -m brownformer` is the `brownformer` command."""
import sys

from brownformer.cli import main

sys.exit(main())
