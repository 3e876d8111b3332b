"""An independent MCP client for consort's tests: the official MCP Python SDK (`mcp` on PyPI).

Usage: client.py URL TOKEN list
       client.py URL TOKEN call TOOL INPUT

TOKEN is `-` for none. Prints one JSON object on stdout: the tools listed (name, description,
input schema), or the tool result (is_error, text, structured). A protocol error prints
{"protocol_error": "..."} and exits 0, so the caller asserts on it.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def run(url: str, token: str, command: list[str]) -> dict:
    headers = {} if token == "-" else {"Authorization": f"Bearer {token}"}
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                if command[0] == "list":
                    listed = await session.list_tools()
                    return {
                        "tools": [
                            {
                                "name": t.name,
                                "description": t.description,
                                "input_schema": t.inputSchema if hasattr(t, "inputSchema") else t.input_schema,
                            }
                            for t in listed.tools
                        ]
                    }
                _, tool, text = command
                result = await session.call_tool(tool, {"input": text})
                is_error = getattr(result, "isError", None)
                if is_error is None:
                    is_error = getattr(result, "is_error", False)
                structured = getattr(result, "structuredContent", None)
                if structured is None:
                    structured = getattr(result, "structured_content", None)
                return {
                    "is_error": bool(is_error),
                    "text": "".join(getattr(c, "text", "") for c in result.content),
                    "structured": structured,
                }


def leaves(e: BaseException) -> list[str]:
    """The messages of an exception, with those of a group's members in its place."""
    if isinstance(e, BaseExceptionGroup):
        return [m for inner in e.exceptions for m in leaves(inner)]
    return [f"{type(e).__name__}: {e}"]


def main() -> None:
    url, token, *command = sys.argv[1:]
    try:
        out = asyncio.run(run(url, token, command))
    except Exception as e:  # the test asserts on what the server said
        out = {"protocol_error": "; ".join(leaves(e))}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
