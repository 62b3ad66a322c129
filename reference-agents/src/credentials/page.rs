//! The connect flow's pages (no script: a message, or the API key form)
//! and the connections page.

use crate::pages::{escape, page, CSP_FORMS, CSP_SCRIPT};
use policy_agents::Deny;

const STYLE: &str = "body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:3em auto;padding:0 1em}\
h1{font-size:1.4em}label{display:block;margin:1em 0 .3em}input{font:inherit;width:100%}\
button{font:inherit;margin-top:1em;padding:.4em 1.2em}";

/// A page saying `text` under `title`.
pub fn message(status: u16, title: &str, text: &str, reason: &str) -> Deny {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\
<style>{STYLE}</style></head><body><main><h1>{t}</h1><p role=\"status\">{x}</p></main></body></html>",
        t = escape(title),
        x = escape(text),
    );
    page(status, html, CSP_FORMS, reason)
}

/// The form where the person pastes their API key for `upstream`.
pub fn key_form(action: &str, state: &str, upstream: &str) -> Deny {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Connect {u}</title>\
<style>{STYLE}</style></head><body><main><h1>Connect {u}</h1>\
<form method=\"post\" action=\"{a}\"><input type=\"hidden\" name=\"state\" value=\"{s}\">\
<label for=\"api_key\">Your {u} API key</label>\
<input id=\"api_key\" name=\"api_key\" type=\"password\" autocomplete=\"off\" required maxlength=\"4096\">\
<button type=\"submit\">Connect</button></form></main></body></html>",
        u = escape(upstream),
        a = escape(action),
        s = escape(state),
    );
    page(200, html, CSP_FORMS, "upstream_connect_key")
}

/// The connections page: a bearer credential typed in, the caller's
/// connections listed from the API, each with a button to revoke it.
pub const CONNECTIONS: &str = r##"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Your connections</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:44em;margin:3em auto;padding:0 1em}
label{display:block;margin:.6em 0 .2em}input{font:inherit;width:100%}button{font:inherit;margin:.6em .4em 0 0}
li{margin:.6em 0}</style></head>
<body><main>
<h1>Your connections</h1>
<p>The accounts you connected for the gateway to use on your behalf. Revoke one and the gateway forgets it; your next call asks you to connect again.</p>
<label for="credential">Your access token (sent as <code>Authorization: Bearer</code>, kept in this tab only)</label>
<input id="credential" type="password" autocomplete="off">
<button id="load" type="button">Show my connections</button>
<ul id="list" aria-label="Connections"></ul>
<p id="status" role="status" aria-live="polite"></p>
</main>
<script>
'use strict';
const base = location.pathname.replace(/\/page$/, '');
const list = document.getElementById('list');
const status = document.getElementById('status');
const cred = document.getElementById('credential');
cred.value = sessionStorage.getItem('connections.credential') || '';
function say(t) { status.textContent = t; }
async function api(method, path) {
  const r = await fetch(base + path, {method, headers: {authorization: 'Bearer ' + cred.value.trim()}});
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || ('HTTP ' + r.status));
  return body;
}
function when(ms) { return ms ? new Date(ms).toLocaleString() : 'no expiry'; }
async function load() {
  sessionStorage.setItem('connections.credential', cred.value);
  try {
    const body = await api('GET', '');
    list.replaceChildren();
    for (const c of body.connections) {
      const li = document.createElement('li');
      li.dataset.upstream = c.upstream;
      const text = document.createElement('span');
      text.textContent = c.upstream + ' (' + c.kind + '), connected ' + when(c.connected_ms) + ', token expires ' + when(c.expires_ms) + ' ';
      const b = document.createElement('button');
      b.type = 'button';
      b.dataset.revoke = c.upstream;
      b.textContent = 'Revoke ' + c.upstream;
      b.addEventListener('click', () => revoke(c.upstream));
      li.append(text, b);
      list.append(li);
    }
    say(body.connections.length ? body.connections.length + ' connection(s)' : 'No connections');
  } catch (e) { say('Could not list connections: ' + e.message); }
}
async function revoke(upstream) {
  try {
    await api('DELETE', '/' + encodeURIComponent(upstream));
    const li = [...list.children].find(x => x.dataset.upstream === upstream);
    if (li) li.remove();
    say('Revoked ' + upstream);
  } catch (e) { say('Could not revoke ' + upstream + ': ' + e.message); }
}
document.getElementById('load').addEventListener('click', load);
</script>
</body></html>
"##;

/// [`CONNECTIONS`], served.
pub fn connections() -> Deny {
    page(200, CONNECTIONS, CSP_SCRIPT, "upstream_connections_page")
}
