"""`python -m memory_pipelines.cli`: the same as `memory-pipelines`."""

import sys

from memory_pipelines.cli import main

if __name__ == "__main__":  # imported (a walk over the package's modules), it runs nothing
    sys.exit(main())
