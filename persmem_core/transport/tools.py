"""Turning plugin functions into MCP tools, and those into the MCP server every transport serves.

A plugin tool is a plain function (sync or async) with type hints and a
docstring. The host wraps it so that:
- a parameter annotated `CallContext` receives the authenticated caller and
  is left out of the MCP input schema (a prompt cannot forge it);
- `UserError` becomes an MCP error result carrying the message;
- any other exception becomes an error result that names the tool and a
  log reference, never a stack trace; the traceback goes to the server log;
- invalid arguments get a short message naming each bad field;
- an argument the tool does not have is refused, naming the tool's arguments and
  the closest one (the SDK would drop it silently: a misspelt `projct` would
  quietly search every project), and the advertised input schema says
  `additionalProperties: false`.
Sync functions run in a worker thread, from a pool of the plugin's own
(`THREADS_PER_PLUGIN`), so one plugin's slow calls (45 shell commands at
once) never hold up another plugin's tools (memory, mail). A tool registered
with `max_concurrent_per_agent` refuses a call, with a clear message, while
that agent already has that many calls of the plugin's limited tools running.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import logging
import uuid
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import ValidationError

from persmem_core import __version__
from persmem_core.auth.scope import agent_of_scope, transport_of_scope
from persmem_core.context import CallContext
from persmem_core.errors import UserError
from persmem_core.tool_sets import in_sets, outside_sets_message, sets_of

if TYPE_CHECKING:
    from persmem_core.host import Host, ToolSpec

log = logging.getLogger("persmem.tools")
_MCP_CONTEXT = "mcp_context"
THREADS_PER_PLUGIN = 8
MAX_UNKNOWN_SHOWN = 5  # unknown argument names quoted in the refusal


class CallLimits:
    """Worker pools per plugin and running calls per (plugin, agent) of limited tools, for one server (one
    event loop)."""

    def __init__(self, threads_per_plugin: int = THREADS_PER_PLUGIN):
        self.threads_per_plugin = threads_per_plugin
        self._pools: dict[str, anyio.CapacityLimiter] = {}
        self._running: dict[tuple[str, str], int] = {}  # (plugin, agent) -> running calls of limited tools

    def pool(self, plugin: str) -> anyio.CapacityLimiter:
        """The plugin's worker threads (made on first use, inside the event loop)."""
        if plugin not in self._pools:
            self._pools[plugin] = anyio.CapacityLimiter(self.threads_per_plugin)
        return self._pools[plugin]

    @contextlib.contextmanager
    def slot(self, spec: ToolSpec, agent: str):
        """Count one running call by `agent` of a limited tool of `spec`'s plugin; refuse it when the agent
        already has the tool's limit of such calls running (so one agent never holds more than that many of
        the plugin's worker threads). Runs on the event loop thread only, so the counts need no lock."""
        limit = spec.max_concurrent_per_agent
        if limit is None:
            yield
            return
        key = (spec.plugin, agent)
        if self._running.get(key, 0) >= limit:
            raise ToolError(f"{spec.name}: you already have {limit} calls running, the most one agent may run at "
                            "once; wait for one to finish and call again.")
        self._running[key] = self._running.get(key, 0) + 1
        try:
            yield
        finally:
            self._running[key] -= 1
            if not self._running[key]:
                del self._running[key]


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_validation_error(tool: str, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(p) for p in err.get("loc", ())) or "(arguments)"
        if err.get("type") == "missing":
            problems.append(f"`{field}` is required")
        else:
            problems.append(f"`{field}`: {err.get('msg')} (got {_short(err.get('input'))})")
    return f"{tool}: invalid arguments: " + "; ".join(problems) + ". Check the tool's input schema and call again."


def describe_unknown_arguments(tool: str, unknown: list[str], valid: list[str]) -> str:
    """`unknown argument 'projct' for memory_search; valid arguments: query, project, ... (did you mean
    'project'?)`. At most a few unknown names are quoted, each shortened: the keys are the caller's text."""
    shown = unknown[:MAX_UNKNOWN_SHOWN]
    names = ", ".join(_short(name, 40) for name in shown) + (f" and {len(unknown) - len(shown)} more"
                                                             if len(unknown) > len(shown) else "")
    text = (f"unknown argument{'s' if len(unknown) > 1 else ''} {names} for {tool}; valid arguments: "
            + (", ".join(valid) if valid else "none (call it with {})"))
    guesses = {name: close[0] for name in shown
               if len(name) <= 60 and (close := difflib.get_close_matches(name, valid, n=1))}
    if len(unknown) == 1 and guesses:
        text += f" (did you mean {next(iter(guesses.values()))!r}?)"
    elif guesses:
        text += " (did you mean " + ", ".join(f"{close!r} for {name!r}" for name, close in guesses.items()) + "?)"
    return text + f". Remove or rename {'them' if len(unknown) > 1 else 'it'} and call again."


class PersmemTool(Tool):
    """An SDK Tool whose argument errors read well and that refuses arguments it does not have."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        valid = list(self.parameters.get("properties", {}))  # the names on the wire (aliases included)
        unknown = [str(key) for key in arguments if key not in valid]
        if unknown:
            raise ToolError(describe_unknown_arguments(self.name, unknown, valid))
        try:
            return await super().run(arguments, context, convert_result=convert_result)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(describe_validation_error(self.name, exc.__cause__)) from None
            raise


class CallerResolver:
    """Finds the calling agent for one MCP request: the one the auth middleware put in the request (HTTP:
    a bearer token or secret path; the local socket: the agent a stdio session speaks for), read through the
    SDK's public request context with `auth.scope.agent_of_scope`. A call that carries no agent is refused,
    never served as a default agent."""

    def __init__(self, host: Host):
        self.host = host

    def __call__(self, mcp_context: Context) -> CallContext:
        try:
            request = mcp_context.request_context.request
        except ValueError:
            request = None
        agent = agent_of_scope(request.scope) if request is not None else None
        if not agent:
            log.error("a tool call reached the tools without an agent; refused")
            raise ToolError("unauthenticated request: no agent identity came with this call; refused.")
        return CallContext(agent=agent, transport=transport_of_scope(request.scope), host=self.host,
                           session_id=request.headers.get("mcp-session-id"))


def build_tool(spec: ToolSpec, resolve_caller: CallerResolver, limits: CallLimits) -> Tool:
    """The MCP tool for `spec`; `limits` is the server's one CallLimits (shared pools and counts)."""
    fn = spec.fn
    signature = inspect.signature(fn, eval_str=True)
    call_params = [p.name for p in signature.parameters.values() if p.annotation is CallContext]
    params = [p for p in signature.parameters.values() if p.name not in call_params]
    params.append(inspect.Parameter(_MCP_CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    is_async = inspect.iscoroutinefunction(fn)
    name = spec.name

    async def tool_wrapper(**kwargs: Any) -> Any:
        caller = resolve_caller(kwargs.pop(_MCP_CONTEXT))
        for param in call_params:
            kwargs[param] = caller
        try:
            with limits.slot(spec, caller.agent):
                if is_async:
                    return await fn(**kwargs)
                return await anyio.to_thread.run_sync(functools.partial(fn, **kwargs),
                                                      limiter=limits.pool(spec.plugin))
        except UserError as exc:
            raise ToolError(str(exc)) from None
        except ToolError:
            raise
        except Exception as exc:
            ref = uuid.uuid4().hex[:10]
            log.exception("tool %s failed (agent=%s, ref=%s)", name, caller.agent, ref)
            raise ToolError(
                f"internal error ({type(exc).__name__}); the server log has the details under reference {ref}. "
                "The server is still running."
            ) from None

    tool_wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    tool_wrapper.__name__ = name
    tool_wrapper.__doc__ = fn.__doc__
    description = spec.description or inspect.cleandoc(fn.__doc__ or "") or name
    tool = PersmemTool.from_function(tool_wrapper, name=name, description=description, context_kwarg=_MCP_CONTEXT)
    tool.parameters["additionalProperties"] = False  # what PersmemTool.run enforces, said in the schema
    tool.parameters = without_titles(tool.parameters)
    return tool


SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")  # name -> schema: the names are data


def without_titles(schema):
    """`schema` without pydantic's generated titles ("Memory Id" for memory_id, "memory_getArguments"): they
    repeat the names, and every connection pays for them in every session (about a fifth of the tokens)."""
    if isinstance(schema, list):
        return [without_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: without_titles(sub) for name, sub in value.items()}
        elif key in ("default", "const", "enum", "examples"):
            out[key] = value  # values, not schemas
        else:
            out[key] = without_titles(value)
    return out


def call_tool(host: Host, name: str, arguments: dict[str, Any] | None = None, *, agent: str) -> Any:
    """Call tool `name` of a started `host` (after `host.startup()`) as `agent`, in this process: for plugin
    authors' tests beside the real-server fixtures (`persmem_core.sdk.testing.call_tool`). The same argument
    checks (unknown or mistyped arguments refused), the agent in the tool's CallContext (transport
    "in-process"), and any refusal raised as UserError with the text an MCP client reads. Returns what the tool
    returns. A real client goes through `build_mcp_server`."""
    arguments = arguments or {}
    specs = {spec.name: spec for spec in host.collect_tools()}
    if name not in specs:
        raise UserError(f"no tool {name!r} is registered; the tools: {', '.join(sorted(specs))}.")
    if agent not in host.agents.names():
        raise UserError(f"no agent {agent!r} in this home; add it first: persmem agent add {agent}.")
    if not in_sets(specs[name], sets_of(host, agent)):
        raise UserError(outside_sets_message(specs[name], agent, sets_of(host, agent)))
    caller = CallContext(agent=agent, transport="in-process", host=host)
    tool = build_tool(specs[name], lambda _context: caller, CallLimits())

    async def call() -> Any:
        return await tool.run(arguments, None)

    try:
        return anyio.run(call)
    except ToolError as exc:
        raise UserError(str(exc).removeprefix(f"Error executing tool {name}: ")) from None


INSTRUCTIONS = (
    "persmem gives you long-term memory, a mailbox to talk with other named agents, and workspace tools. "
    "Your agent identity comes from your credentials, not from tool arguments; persmem_whoami shows it."
)


def _agent_of(ctx) -> str | None:
    request = getattr(ctx, "request", None)
    return agent_of_scope(request.scope) if request is not None else None


def build_mcp_server(host: Host):
    """The MCP server of every plugin's tools; the caller comes from each request (HTTP auth, or the agent a
    stdio session forwards over the local socket). tools/list answers only the caller's tool sets, and a call to
    a tool outside them is refused naming the command that adds its set (tool_sets.py)."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import CallToolResult, ListToolsResult, TextContent

    resolver, limits = CallerResolver(host), CallLimits()
    specs = {spec.name: spec for spec in host.collect_tools()}
    tools = [build_tool(spec, resolver, limits) for spec in specs.values()]

    class SetServer(MCPServer):
        async def _handle_list_tools(self, ctx, params):
            agent = _agent_of(ctx)
            listed = await self.list_tools()
            if not agent:
                return ListToolsResult(tools=[])
            sets = sets_of(host, agent)
            return ListToolsResult(tools=[tool for tool in listed
                                          if tool.name in specs and in_sets(specs[tool.name], sets)])

        async def _handle_call_tool(self, ctx, params):
            spec, agent = specs.get(params.name), _agent_of(ctx)
            if spec is not None and agent:
                sets = sets_of(host, agent)
                if not in_sets(spec, sets):
                    return CallToolResult(content=[TextContent(type="text", text=outside_sets_message(
                        spec, agent, sets))], is_error=True)
            return await super()._handle_call_tool(ctx, params)

    return SetServer("persmem", version=__version__, instructions=INSTRUCTIONS, tools=tools)
