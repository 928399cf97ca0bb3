"""A well-behaved test plugin: tools that echo, fail on purpose, and report the caller."""

import asyncio

from persmem_core import CallContext, ConfigSection, UserError, hookimpl


class EchoConfig(ConfigSection):
    prefix: str = "echo"
    repeat: int = 1
    names: list[str] = []


def echo_say(text: str, times: int = 1, call: CallContext = None) -> dict:
    """Echo `text` back `times` times, with the caller's agent name."""
    prefix = call.host.section("echo").prefix
    return {"text": " ".join([text] * times), "prefix": prefix, "agent": call.agent}


def echo_refuse(reason: str) -> dict:
    """Always refuse with a user error that carries `reason`."""
    raise UserError(f"refused on purpose: {reason}")


def echo_crash() -> dict:
    """Crash with an unexpected exception (the server must survive it)."""
    raise RuntimeError("secret internal detail that must not reach the client")


async def echo_slow(seconds: float = 0.2) -> dict:
    """Sleep asynchronously, then answer."""
    await asyncio.sleep(seconds)
    return {"slept": seconds}


@hookimpl
def register_config(register):
    register("echo", EchoConfig)


@hookimpl
def register_tools(register):
    for fn in (echo_say, echo_refuse, echo_crash, echo_slow):
        register(fn)


@hookimpl
def doctor(host):
    from persmem_core.sdk import pass_

    return [pass_("echo plugin", f"prefix {host.section('echo').prefix!r}")]


@hookimpl
def backup(host, dest):
    (dest / "echo.txt").write_text(host.section("echo").prefix)


@hookimpl
def startup(host):
    (host.data_dir("echo") / "lifecycle.log").open("a").write("startup\n")


@hookimpl
def shutdown(host):
    (host.data_dir("echo") / "lifecycle.log").open("a").write("shutdown\n")
