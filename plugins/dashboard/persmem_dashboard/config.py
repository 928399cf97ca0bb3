"""[dashboard] section of persmem.toml."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from persmem_core.sdk import ConfigSection


class DashboardConfig(ConfigSection):
    enabled: Annotated[bool, Meta(description="Serve the dashboard inside `persmem serve`.")] = True
    prefix: Annotated[str, Meta(pattern=r"^/[a-z0-9_-]+$", description="URL path of the dashboard.")] = "/dashboard"
    login_agents: Annotated[
        list[str],
        Meta(description="Agents whose token may log in (empty: every agent). Log in with the token "
                         "`persmem agent add NAME` printed."),
    ] = []
    session_hours: Annotated[
        float, Meta(gt=0, description="How long a login lasts, counted from the login (using the dashboard does "
                                      "not extend it).")
    ] = 12.0
    title: Annotated[str, Meta(description="Shown in the header.")] = "persmem"
