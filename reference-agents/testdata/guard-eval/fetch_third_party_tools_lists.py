"""Fetches the tool definitions of widely used third-party MCP servers
(their `tools/list` over stdio, with the MCP Python SDK client) and of one
agent's own tool declarations (Gemini CLI's, read from its npm package),
and writes `tools-lists-third-party.jsonl` (one line per source: `source`,
`package`, `version`, `licence`, `tools`). Servers are started with dummy
credentials: listing tools calls no remote API.

Development time only (nothing is downloaded at run time or in tests):

    mkdir /tmp/mcp3 && cd /tmp/mcp3 && npm init -y && npm install --ignore-scripts \\
        @playwright/mcp chrome-devtools-mcp @upstash/context7-mcp \\
        @notionhq/notion-mcp-server firecrawl-mcp @modelcontextprotocol/server-github \\
        @modelcontextprotocol/server-puppeteer @modelcontextprotocol/server-brave-search \\
        @modelcontextprotocol/server-slack @modelcontextprotocol/server-postgres \\
        @modelcontextprotocol/server-gitlab @modelcontextprotocol/server-google-maps \\
        mcp-server-kubernetes tavily-mcp mongodb-mcp-server \\
        @wonderwhy-er/desktop-commander figma-developer-mcp \\
        @google/gemini-cli-core @google/genai zod zod-to-json-schema
    .venv/bin/python fetch_third_party_tools_lists.py /tmp/mcp3 > tools-lists-third-party.jsonl

(`.venv` is the project's: it has the MCP SDK.) Packages without a licence
that allows copying their text are left out.
"""

import asyncio
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fetch_tools_lists import tools_of  # noqa: E402

# (npm package, arguments, environment): dummy credentials where a server
# wants one to start.
SERVERS = [
    ("@playwright/mcp", [], {}),
    ("chrome-devtools-mcp", [], {}),
    ("@upstash/context7-mcp", [], {}),
    ("@notionhq/notion-mcp-server", [], {"NOTION_TOKEN": "ntn_dummy"}),
    ("firecrawl-mcp", [], {"FIRECRAWL_API_KEY": "fc-dummy"}),
    ("@modelcontextprotocol/server-github", [], {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_dummy"}),
    ("@modelcontextprotocol/server-puppeteer", [], {}),
    ("@modelcontextprotocol/server-brave-search", [], {"BRAVE_API_KEY": "dummy"}),
    ("@modelcontextprotocol/server-slack", [], {"SLACK_BOT_TOKEN": "xoxb-dummy", "SLACK_TEAM_ID": "T0"}),
    ("@modelcontextprotocol/server-postgres", ["postgresql://localhost/x"], {}),
    ("@modelcontextprotocol/server-gitlab", [], {"GITLAB_PERSONAL_ACCESS_TOKEN": "dummy"}),
    ("@modelcontextprotocol/server-google-maps", [], {"GOOGLE_MAPS_API_KEY": "dummy"}),
    ("mcp-server-kubernetes", [], {}),
    ("tavily-mcp", [], {"TAVILY_API_KEY": "tvly-dummy"}),
    ("mongodb-mcp-server", [], {}),
    ("@wonderwhy-er/desktop-commander", [], {}),
    ("figma-developer-mcp", ["--stdio"], {"FIGMA_API_KEY": "dummy"}),
]

# Gemini CLI's tool declarations (each model family's set, the shell tool's
# variants), as MCP-shaped tools: name, description, inputSchema.
GEMINI_CLI = r"""
const m = await import(process.argv[1] + '/node_modules/@google/gemini-cli-core/dist/src/tools/definitions/coreTools.js');
const seen = new Set(), tools = [];
const add = (d) => {
  if (!d || typeof d !== 'object' || !d.name) return;
  const t = {name: d.name, description: d.description || '', inputSchema: d.parametersJsonSchema || d.parameters || {}};
  const s = JSON.stringify(t); if (seen.has(s)) return; seen.add(s); tools.push(t);
};
for (const [k, v] of Object.entries(m)) if (k.endsWith('_SET')) Object.values(v).forEach(add);
for (const a of [false, true]) for (const b of [false, true]) for (const c of [false, true]) add(m.getShellDefinition(a, b, c).base);
add(m.getExitPlanModeDefinition().base);
add(m.getActivateSkillDefinition(['pdf', 'docx']).base);
console.log(JSON.stringify(tools));
"""


def package(root, name):
    with open(os.path.join(root, "node_modules", name, "package.json")) as f:
        return json.load(f)


async def main(root):
    for name, args, env in SERVERS:
        pj = package(root, name)
        entry = pj["bin"] if isinstance(pj["bin"], str) else next(iter(pj["bin"].values()))
        script = os.path.join(root, "node_modules", name, entry)
        environ = dict(os.environ, HOME=tempfile.mkdtemp(), **env)
        tools = await asyncio.wait_for(tools_of("node", [script, *args], environ), 120)
        print(json.dumps({"source": name, "package": "npm " + name, "version": pj["version"],
                          "licence": pj.get("license", ""), "tools": tools}), flush=True)
    core = "@google/gemini-cli-core"
    pj = package(root, core)
    out = subprocess.run(["node", "--input-type=module", "-e", GEMINI_CLI, root],
                         capture_output=True, text=True, check=True).stdout
    print(json.dumps({"source": "gemini-cli (tool declarations)", "package": "npm " + core,
                      "version": pj["version"], "licence": pj.get("license", ""), "tools": json.loads(out)}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/mcp3"))
