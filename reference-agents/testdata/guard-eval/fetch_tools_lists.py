"""Fetches the `tools/list` results of the official MCP reference servers
over stdio with the MCP Python SDK client, and writes `tools-lists.jsonl`
(one line per server: `source`, `package`, `version`, `licence`, `tools`).

Development time only (nothing is downloaded at run time or in tests):

    mkdir /tmp/mcpref && cd /tmp/mcpref && npm init -y && npm install \
        @modelcontextprotocol/server-filesystem @modelcontextprotocol/server-memory \
        @modelcontextprotocol/server-everything @modelcontextprotocol/server-sequential-thinking
    python3 -m venv venv && venv/bin/pip install mcp mcp-server-fetch mcp-server-git mcp-server-time
    venv/bin/python fetch_tools_lists.py /tmp/mcpref > tools-lists.jsonl
"""

import asyncio
import json
import os
import subprocess
import sys
import tempfile

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def npm_version(root, name):
    with open(os.path.join(root, "node_modules", name, "package.json")) as f:
        j = json.load(f)
    return j["version"], j.get("license", "")


def pip_version(py, name):
    out = subprocess.run([py, "-m", "pip", "show", name], capture_output=True, text=True).stdout
    fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    return fields.get("Version", ""), fields.get("License", "")


async def tools_of(command, args, env=None):
    params = StdioServerParameters(command=command, args=args, env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.list_tools()
            return [t.model_dump(mode="json", exclude_none=True, by_alias=True) for t in result.tools]


async def main(root):
    py = os.path.join(root, "venv", "bin", "python")
    work = tempfile.mkdtemp()
    subprocess.run(["git", "init", "-q", work], check=True)
    npm = [
        ("@modelcontextprotocol/server-filesystem", "dist/index.js", [work]),
        ("@modelcontextprotocol/server-memory", "dist/index.js", []),
        ("@modelcontextprotocol/server-everything", "dist/index.js", ["stdio"]),
        ("@modelcontextprotocol/server-sequential-thinking", "dist/index.js", []),
    ]
    for name, entry, extra in npm:
        version, licence = npm_version(root, name)
        script = os.path.join(root, "node_modules", name, entry)
        env = dict(os.environ, MEMORY_FILE_PATH=os.path.join(work, "memory.jsonl"))
        tools = await tools_of("node", [script, *extra], env)
        print(json.dumps({"source": name.split("/")[1], "package": "npm " + name, "version": version,
                          "licence": licence, "tools": tools}))
    pips = [
        ("mcp-server-fetch", "mcp_server_fetch", []),
        ("mcp-server-git", "mcp_server_git", ["--repository", work]),
        ("mcp-server-time", "mcp_server_time", []),
    ]
    for name, module, extra in pips:
        version, licence = pip_version(py, name)
        tools = await tools_of(py, ["-m", module, *extra])
        print(json.dumps({"source": name, "package": "PyPI " + name, "version": version,
                          "licence": licence, "tools": tools}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/mcpref"))
