"""The protocol era of one stdio session (stdio_bridge.py), and the headers that put each of its messages on the
owner's path for that era.

The client's first request decides: `initialize` opens a handshake-era session (MCP 2025-11-25 and earlier), whose
messages go to the owner carrying the negotiated version; a request carrying the 2026-07-28 `_meta` envelope opens
a 2026-07-28 session, whose requests carry the routing headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`)
mirrored from the body. A message that does not belong to the session's era is `Refused` with the answer the SDK's
own stdio server gives.
"""

from __future__ import annotations

from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    InboundLadderRejection,
    classify_inbound_request,
    encode_header_value,
)
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PROTOCOL_VERSION_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    UnsupportedProtocolVersionErrorData,
)
from mcp_types.version import LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS


class Refused(Exception):
    """A message the bridge answers itself with a JSON-RPC error, as the SDK's stdio server would."""

    def __init__(self, code: int, message: str, data=None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def error(self) -> dict:
        return {"code": self.code, "message": self.message} | ({"data": self.data} if self.data is not None else {})


def has_modern_envelope(params) -> bool:
    """Whether a request carries the 2026-07-28 per-request envelope: its reserved protocol-version key in
    `params._meta` (handshake-era requests never carry it; their `_meta` holds e.g. a progressToken)."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


class SessionEra:
    """What one stdio session has learned of its protocol era, and the headers each of its messages gets."""

    def __init__(self) -> None:
        self.protocol_version: str | None = None  # handshake era: the version `initialize` negotiated
        self.era: str | None = None  # "legacy" or "modern", decided by the client's first request
        self.modern_version = LATEST_MODERN_VERSION  # modern era: the version the client's requests name

    def headers(self, message: dict, is_request: bool) -> dict[str, str]:
        """The headers that put `message` on the owner's path for this session's protocol era; Refused when
        the message does not belong to it (the same answers as the SDK's own stdio server gives)."""
        method, params = message["method"], message.get("params")
        if not isinstance(method, str):
            raise Refused(INVALID_REQUEST, "invalid request: the method must be a string.")
        enveloped = method != "initialize" and has_modern_envelope(params)
        if self.era is None and is_request:  # decided before any await: lines are taken in the order they came
            self.era = "modern" if enveloped else "legacy"
        if not is_request:  # a notification: the owner acknowledges it on the path of the session's era
            if self.era == "modern" or (self.era is None and enveloped):
                return {MCP_PROTOCOL_VERSION_HEADER: self.modern_version, MCP_METHOD_HEADER: method}
            return {MCP_PROTOCOL_VERSION_HEADER: self.protocol_version} if self.protocol_version else {}
        if self.era == "legacy":
            if enveloped:
                raise Refused(INVALID_REQUEST, "this stdio session began with the initialize handshake (MCP "
                              "2025-11-25 or earlier), so a request carrying the 2026-07-28 _meta envelope is "
                              "not accepted on it; start a new session to speak 2026-07-28.")
            if self.protocol_version and method != "initialize":
                return {MCP_PROTOCOL_VERSION_HEADER: self.protocol_version}
            return {}
        if method == "initialize":
            requested = params.get("protocolVersion") if isinstance(params, dict) else None
            data = (UnsupportedProtocolVersionErrorData(supported=list(MODERN_PROTOCOL_VERSIONS), requested=requested)
                    .model_dump(mode="json") if isinstance(requested, str) else
                    {"supported": list(MODERN_PROTOCOL_VERSIONS)})
            raise Refused(UNSUPPORTED_PROTOCOL_VERSION, "this stdio session serves MCP 2026-07-28 (its first "
                          "request carried the 2026-07-28 envelope); the initialize handshake is not accepted on "
                          "it: start a new session for an earlier version.", data)
        route = classify_inbound_request(message)  # the envelope's own checks: what the headers cannot express
        if isinstance(route, InboundLadderRejection):
            raise Refused(route.code, route.message, route.data)
        self.modern_version = route.protocol_version
        headers = {MCP_PROTOCOL_VERSION_HEADER: route.protocol_version, MCP_METHOD_HEADER: method}
        name_key = NAME_BEARING_METHODS.get(method)
        if name_key is not None and name_key in params:
            name = params[name_key]
            if not isinstance(name, str):
                raise Refused(INVALID_PARAMS, f"invalid params: {name_key!r} must be a string.")
            headers[MCP_NAME_HEADER] = encode_header_value(name)
        return headers
