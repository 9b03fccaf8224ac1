"""`python -m noeta` is the `noeta` command."""

from noeta.cli.main import main

main()
