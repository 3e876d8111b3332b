"""A payment server for tests/approval_gates.rs: `pay` records a payment in `payments.log` (in
the folder it runs in: the agent's) and flushes it to disk before it answers, so a test can
tell whether a payment was made whatever happens to the host after. While a file `slow` exists
there, `pay` answers only after 60 s (time for a test to kill the host while the tool runs).
Built with the official MCP Python SDK (`mcp` on PyPI), spoken over stdio.
"""

import os
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("bank")


@server.tool(name="pay", description="Pays an amount to a payee")
def pay(amount: int, to: str) -> str:
    with open("payments.log", "a", encoding="utf-8") as ledger:
        ledger.write(f"{amount} {to}\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    if os.path.exists("slow"):
        time.sleep(60)
    return f"paid {amount} to {to}"


if __name__ == "__main__":
    server.run()
