"""Built-in `persmem` subcommands, one module each."""
