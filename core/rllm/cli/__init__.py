"""The ``rllm`` command line; each subcommand is one module with ``add_parser`` and ``run``."""
