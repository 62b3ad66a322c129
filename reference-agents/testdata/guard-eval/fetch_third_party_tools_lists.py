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
    # the second set, measured after the first set's fixes:
    mkdir /tmp/mcp5 && cd /tmp/mcp5 && npm init -y && npm install --ignore-scripts \
        @executeautomation/playwright-mcp-server @browserbasehq/mcp-server-browserbase \
        @hubspot/mcp-server @agentdeskai/browser-tools-mcp @cloudflare/mcp-server-cloudflare
    python3 -m venv /tmp/mcp4 && /tmp/mcp4/bin/pip install \
        awslabs.aws-documentation-mcp-server arxiv-mcp-server
    .venv/bin/python fetch_third_party_tools_lists.py /tmp/mcp3 /tmp/mcp5 /tmp/mcp4 \
        > tools-lists-third-party.jsonl

(`.venv` is the project's: it has the MCP SDK.) Packages without a licence
that allows copying their text are left out.

Codex's own declarations (added after the rest, on 2026-12-07) are taken
from its first model call: `codex exec` is run against a local stand-in
for the Responses API that records the request and answers 400; the
declarations are its `tools` and its `additional_tools` input items', a
namespace's description and each tool in it as one tool:

    mkdir /tmp/agents && cd /tmp/agents && npm init -y && npm install @openai/codex
    .venv/bin/python fetch_third_party_tools_lists.py --codex /tmp/agents >> tools-lists-third-party.jsonl

(Claude Code's are measured the same way in the guard's docs, and not
written here: its package's licence does not allow copying them.)
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

# The second set, first scored after the first set's fixes.
SERVERS_2 = [
    ("@executeautomation/playwright-mcp-server", [], {}),
    ("@browserbasehq/mcp-server-browserbase", [], {"BROWSERBASE_API_KEY": "dummy", "BROWSERBASE_PROJECT_ID": "dummy",
                                                   "GEMINI_API_KEY": "dummy"}),
    ("@hubspot/mcp-server", [], {"PRIVATE_APP_ACCESS_TOKEN": "dummy"}),
    ("@agentdeskai/browser-tools-mcp", [], {}),
    ("@cloudflare/mcp-server-cloudflare", ["run", "dummy"], {"CLOUDFLARE_API_TOKEN": "dummy"}),
]
# (PyPI package, its console script): the second set's Python servers.
PYPI_2 = [
    ("awslabs.aws-documentation-mcp-server", "awslabs.aws-documentation-mcp-server"),
    ("arxiv-mcp-server", "arxiv-mcp-server"),
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


async def npm_servers(root, servers):
    for name, args, env in servers:
        pj = package(root, name)
        entry = pj["bin"] if isinstance(pj["bin"], str) else next(iter(pj["bin"].values()))
        script = os.path.join(root, "node_modules", name, entry)
        environ = dict(os.environ, HOME=tempfile.mkdtemp(), **env)
        tools = await asyncio.wait_for(tools_of("node", [script, *args], environ), 120)
        print(json.dumps({"source": name, "package": "npm " + name, "version": pj["version"],
                          "licence": pj.get("license", ""), "tools": tools}), flush=True)


async def main(root, root_2, venv_2):
    await npm_servers(root, SERVERS)
    await npm_servers(root_2, SERVERS_2)
    for name, script in PYPI_2:
        meta = json.loads(subprocess.run(
            [os.path.join(venv_2, "bin", "python"), "-c",
             "import json, sys; from importlib.metadata import metadata; m = metadata(sys.argv[1]); "
             "print(json.dumps([m['Version'], m.get('License-Expression') or m.get('License') or '']))", name],
            capture_output=True, text=True, check=True).stdout)
        environ = dict(os.environ, HOME=tempfile.mkdtemp())
        tools = await asyncio.wait_for(tools_of(os.path.join(venv_2, "bin", script), [], environ), 120)
        print(json.dumps({"source": name, "package": "PyPI " + name, "version": meta[0],
                          "licence": meta[1], "tools": tools}), flush=True)
    core = "@google/gemini-cli-core"
    pj = package(root, core)
    out = subprocess.run(["node", "--input-type=module", "-e", GEMINI_CLI, root],
                         capture_output=True, text=True, check=True).stdout
    print(json.dumps({"source": "gemini-cli (tool declarations)", "package": "npm " + core,
                      "version": pj["version"], "licence": pj.get("license", ""), "tools": json.loads(out)}))


def first_model_call(command, env):
    """Runs `command` against a local stand-in for a model API and returns
    the first request body it sends (as JSON)."""
    import http.server
    import threading
    bodies = []

    class Stand(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(self.rfile.read(int(self.headers.get("content-length") or 0)))
            reply = b'{"error": {"type": "invalid_request_error", "message": "recorded"}}'
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stand)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = "http://127.0.0.1:%d/v1" % server.server_address[1]
        subprocess.run([c.replace("{url}", url) for c in command], env=env, cwd=tempfile.mkdtemp(),
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    finally:
        server.shutdown()
    return json.loads(bodies[0])


def responses_declarations(body):
    """A Responses call's declarations as MCP-shaped tools: `tools` and the
    `additional_tools` input items' tools, a namespace's own description
    and each of its tools."""
    lists = [body.get("tools") or []]
    lists += [i.get("tools") or [] for i in body.get("input") or [] if i.get("type") == "additional_tools"]
    out = []

    def add(t):
        tool = {"name": t.get("name", ""), "description": t.get("description", "")}
        if t.get("parameters") is not None:
            tool["inputSchema"] = t["parameters"]
        if t.get("output_schema") is not None:
            tool["outputSchema"] = t["output_schema"]
        out.append(tool)

    for tools in lists:
        for t in tools:
            add(t)
            if t.get("type") == "namespace":
                for inner in t.get("tools") or []:
                    add(inner)
    return out


def codex(root):
    pj = package(root, "@openai/codex")
    home = tempfile.mkdtemp()
    os.makedirs(os.path.join(home, ".codex"))
    env = dict(os.environ, HOME=home, CODEX_HOME=os.path.join(home, ".codex"), OPENAI_API_KEY="sk-dummy")
    provider = 'model_providers.stand={name="stand",base_url="{url}",env_key="OPENAI_API_KEY",wire_api="responses"}'
    body = first_model_call([os.path.join(root, "node_modules", ".bin", "codex"), "exec", "--skip-git-repo-check",
                             "-c", provider, "-c", "model_provider=stand", "List the files here."], env)
    print(json.dumps({"source": "codex (tool declarations)", "package": "npm @openai/codex", "version": pj["version"],
                      "licence": pj.get("license", ""), "tools": responses_declarations(body)}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--codex"]:
        codex(sys.argv[2])
        sys.exit(0)
    args = sys.argv[1:] + ["/tmp/mcp3", "/tmp/mcp5", "/tmp/mcp4"][len(sys.argv) - 1:]
    asyncio.run(main(*args[:3]))
