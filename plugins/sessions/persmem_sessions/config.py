"""[sessions] section of persmem.toml."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from persmem_core.sdk import ConfigSection


class SessionsConfig(ConfigSection):
    briefing_tokens: Annotated[
        int, Meta(ge=200, le=20_000, description="Size of the briefing a session starts with, in tokens (about 4 "
                                                  "characters each): identity, directives, handoff, memories, mail.")
    ] = 2000
    recall_top_k: Annotated[
        int, Meta(ge=1, le=10, description="Most memories added to one prompt (only those above the score floor, "
                                           "never one this session already received).")
    ] = 3
    recall_chars: Annotated[
        int, Meta(ge=200, le=20_000, description="Longest text added to one prompt, in characters.")
    ] = 2000
    tool_output_chars: Annotated[
        int, Meta(ge=100, description="Tool calls' inputs and outputs are cut to this many characters in the index.")
    ] = 2000
    projects: Annotated[
        dict[str, str],
        Meta(description='Project names by working folder: {"/home/me/src/infra" = "infra"}; the longest matching '
                         "folder wins. Elsewhere the project is the git root's folder name, else the folder's name."),
    ] = {}
