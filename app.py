"""RLHF Studio entry point: `python app.py` serves the studio; `python app.py --help` lists the subcommands.

The command line lives in `app/commands/cli.py`; this file only runs it.
"""

import sys

from app.commands.cli import main

if __name__ == "__main__":
    sys.exit(main())
