"""A plugin whose startup fails (the server must not start, and must say which plugin and why)."""

from persmem_core import hookimpl


def failing_hello() -> dict:
    """Never callable: the server does not start."""
    return {}


@hookimpl
def register_tools(register):
    register(failing_hello)


@hookimpl
def startup(host):
    raise OSError("the store folder /nonexistent/store cannot be opened")
