"""`python -m persmem_core` is the `persmem` command."""

from persmem_core.cli.main import main

main()
