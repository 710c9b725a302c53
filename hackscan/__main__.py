"""``python -m hackscan`` runs the command line (where the ``hackscan`` script is not installed)."""

from hackscan.cli import run_cli

run_cli()
