"""The time MCP server from PyPI (`mcp-server-time`) served over streamable HTTP, for
tests/mcp_tools.rs: the same tools as `python -m mcp_server_time` on stdio, reached by URL.

Usage: time_http.py PORT [TOKEN]

Serves http://127.0.0.1:PORT/mcp with the official MCP Python SDK (`mcp` on PyPI). With TOKEN,
a request without `Authorization: Bearer TOKEN` is answered 401 before it reaches the server.
"""

import sys

import uvicorn
from mcp_server_time.server import create_server


def main() -> None:
    port = int(sys.argv[1])
    token = sys.argv[2] if len(sys.argv) > 2 else None
    app = create_server("UTC").streamable_http_app()
    expected = f"Bearer {token}".encode() if token is not None else None

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and expected is not None:
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != expected:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"text/plain")],
                    }
                )
                await send({"type": "http.response.body", "body": b"wrong bearer token"})
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
