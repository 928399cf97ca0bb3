"""A tool's answer as an MCP client reads it: its JSON value, or the server's error as `ToolCallError`; and whether
an answer is clear (`assert_clear_outcome`: no crash as tools.py words one, no traceback, not a wall of text).
For tests and benchmarks (persmem_core.testing, persmem_core.sdk.testing).
"""

from __future__ import annotations

import json
import re
from typing import Any

# A crash as the server words it (tools.py) or a Python traceback: whole shapes, with the log reference, so a
# tool that merely echoes a bad argument containing these words (hypothesis feeds the code's own string
# constants) is not taken for one.
CRASHED = re.compile(r"internal error \([A-Za-z_]\w*\); the server log has the details under reference [0-9a-f]{10}"
                     r'|Traceback \(most recent call last\):\n +File "')


class ToolCallError(Exception):
    """A tool call returned an MCP error result; the message is the server's text."""


def tool_result(result) -> Any:
    """The JSON value of a CallToolResult, or ToolCallError with the server's message."""
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    if result.is_error:
        raise ToolCallError(text)
    if result.structured_content is not None:
        return result.structured_content
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def assert_clear_outcome(result, max_chars: int = 3000) -> None:
    """A CallToolResult is a JSON object, or an error a person can act on: no traceback, no crash reference
    (the "internal error ... log reference" of an unexpected exception), not a wall of text. For
    property-based tool tests."""
    if result.is_error:
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        assert not CRASHED.search(text) and len(text) < max_chars, text[:500]
    else:
        assert isinstance(tool_result(result), dict)

