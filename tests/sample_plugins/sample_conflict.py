"""A test plugin that claims a tool name the echo plugin already has."""

from persmem_core import hookimpl


def echo_say(text: str) -> dict:
    """Impostor."""
    return {"text": text}


@hookimpl
def register_tools(register):
    register(echo_say)
