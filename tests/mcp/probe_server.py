"""An MCP server for tests/mcp_tools.rs that reports what it was started with and can be made
slow: `environment` answers the environment variables it got (what a `kind: mcp` entry's
`env_keys` let through, and that nothing else of the agent's or the host's environment reaches a
started server); `sleep` answers after the given number of seconds (a use past its entry's
`timeout_ms`). Built with the official MCP Python SDK (`mcp` on PyPI), spoken over stdio.
"""

import os
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("probe")


@server.tool(name="environment", description="The environment variables this server got")
def environment() -> dict[str, str]:
    return dict(os.environ)


@server.tool(name="sleep", description="Answers after the given number of seconds")
def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return f"slept {seconds} s"


if __name__ == "__main__":
    server.run()
