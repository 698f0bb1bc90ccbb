"""The command line: `cli.py` the table of `python app.py`'s subcommands, a module each."""
