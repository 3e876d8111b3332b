"""An MCP server that reports the environment it was started with, for tests/mcp_tools.rs: what
a `kind: mcp` entry's `env_keys` let through, and that nothing else of the agent's or the host's
environment reaches a started server. Built with the official MCP Python SDK (`mcp` on PyPI),
spoken over stdio.
"""

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("env-report")


@server.tool(name="environment", description="The environment variables this server got")
def environment() -> dict[str, str]:
    return dict(os.environ)


if __name__ == "__main__":
    server.run()
