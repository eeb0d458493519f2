// agentbox's web console: a client of the daemon's HTTP API and nothing
// else. Every call carries the API key the user signed in with, kept in
// this tab's sessionStorage only; the console can do what that key can do
// through the API. The DOM is built with textContent, never by parsing HTML.

const KEY = "agentbox.key";
const main = document.getElementById("main");

// ---- helpers -------------------------------------------------------------

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function key() { return sessionStorage.getItem(KEY) || ""; }

class APIError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

// api calls the daemon's API with the key; json: a body to send as JSON;
// body: a raw body; raw: return the Response itself.
async function api(method, path, { json, body, raw, headers } = {}) {
  const h = { Authorization: "Bearer " + key(), ...(headers || {}) };
  if (json !== undefined) { h["Content-Type"] = "application/json"; body = JSON.stringify(json); }
  const r = await fetch(path, { method, headers: h, body });
  if (!r.ok) {
    let code = "", msg = r.status + " " + r.statusText;
    try { const e = (await r.json()).error; code = e.code; msg = e.message; } catch (_) { /* not JSON */ }
    throw new APIError(r.status, code, msg);
  }
  if (raw) return r;
  if (r.status === 204) return null;
  return r.json();
}

function sbPath(id, rest = "") { return "/v1/sandboxes/" + encodeURIComponent(id) + rest; }

function showError(err) {
  const box = document.getElementById("error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.textContent = err.message || String(err);
  box.hidden = false;
}

// act runs an action, showing its error; then re-renders the page.
async function act(fn) {
  showError(null);
  try { await fn(); } catch (e) { failed(e); }
  route();
}

function age(t) {
  if (!t) return "";
  let s = Math.round((Date.now() - new Date(t).getTime()) / 1000);
  const neg = s < 0; s = Math.abs(s);
  const v = s < 120 ? s + "s" : s < 7200 ? Math.round(s / 60) + "m" : s < 172800 ? Math.round(s / 3600) + "h" : Math.round(s / 86400) + "d";
  return neg ? "in " + v : v;
}

function ttl(sb) {
  if (!sb.expires_at) return "none";
  const s = Math.round((new Date(sb.expires_at).getTime() - Date.now()) / 1000);
  return s <= 0 ? "expired" : age(new Date(Date.now() - s * 1000)) + " left";
}

function bytes(n) {
  if (n == null) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function table(head, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

function field(label, input) { return el("label", {}, label, input); }

// ---- sign in ---------------------------------------------------------------

let isAdmin = false;

function signOut(why) {
  for (const k of Object.keys(sessionStorage)) if (k.startsWith("agentbox.")) sessionStorage.removeItem(k);
  isAdmin = false;
  document.getElementById("nav-admin").hidden = true;
  if (location.hash !== "#/signin") history.replaceState(null, "", "#/signin");
  return route().then(() => showError(why ? new Error(why) : null));
}

// failed shows an error; a refused key signs out.
function failed(e) {
  if (e instanceof APIError && e.status === 401) return signOut("The key was refused: " + e.message);
  showError(e);
}

function renderSignIn() {
  const input = el("input", { id: "key", type: "password", autocomplete: "off", placeholder: "ak_...", required: true });
  const form = el("form", { class: "signin", id: "signin" },
    el("h1", {}, "Sign in"),
    el("p", { class: "note" }, "Paste an API key. It is kept in this tab's session only and sent to this daemon's API with every call; the console can do what the key can."),
    field("API key", input),
    el("button", { class: "primary", type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, input.value.trim());
    try {
      await api("GET", "/v1/info");
      showError(null);
      await probeAdmin();
      // Where the URL named a page (a link, a reload), show it.
      if (location.hash === "" || location.hash === "#/signin") location.hash = "#/sandboxes";
      else route();
    } catch (e) {
      sessionStorage.removeItem(KEY);
      showError(e);
    }
  });
  main.replaceChildren(form);
  input.focus();
}

async function probeAdmin() {
  try { await api("GET", "/v1/tenants"); isAdmin = true; } catch (_) { isAdmin = false; }
  document.getElementById("nav-admin").hidden = !isAdmin;
  document.getElementById("who").textContent = isAdmin ? "signed in with an admin key" : "signed in";
}

// ---- sandboxes -------------------------------------------------------------

async function renderSandboxes() {
  const [list, info, tpls] = await Promise.all([
    api("GET", "/v1/sandboxes"), api("GET", "/v1/info"), api("GET", "/v1/templates")]);
  const rows = list.sandboxes.map((sb) => el("tr", { "data-id": sb.id },
    el("td", { class: "mono" }, el("a", { href: "#/sandbox/" + sb.id + "/terminal" }, sb.id)),
    el("td", { class: "state-" + sb.state }, sb.state),
    el("td", {}, sb.template),
    el("td", {}, sb.isolation),
    el("td", {}, age(sb.created_at)),
    el("td", {}, ttl(sb)),
    el("td", {}, sb.resources.cpu + " cpu, " + sb.resources.memory_mb + " MB"),
    el("td", { class: "usage" }, ""),
    el("td", {}, actionButtons(sb))));
  main.replaceChildren(
    el("h1", {}, "Sandboxes"),
    createForm(info, tpls.templates),
    el("h2", {}, list.sandboxes.length + " sandbox(es)"),
    table(["ID", "State", "Template", "Tier", "Age", "TTL", "Resources", "Usage", "Actions"], rows));
  // Usage: each live sandbox's last sample (GET .../metrics), filled in
  // as the answers come; the first 50 only.
  list.sandboxes.filter((sb) => sb.state === "running" || sb.state === "paused").slice(0, 50).forEach((sb) => {
    api("GET", sbPath(sb.id, "/metrics")).then((m) => {
      const last = m.samples[m.samples.length - 1];
      const cell = main.querySelector('tr[data-id="' + CSS.escape(sb.id) + '"] td.usage');
      if (cell && last) cell.textContent = last.cpu_percent.toFixed(0) + "% cpu, " + bytes(last.memory_bytes) + ", " + bytes(last.disk_bytes) + " disk";
    }).catch(() => { /* usage is optional */ });
  });
}

function createForm(info, templates) {
  const tpl = el("select", { name: "template", id: "create-template" },
    templates.map((t) => el("option", { value: t.name, selected: t.name === info.default_template }, t.name)));
  const tier = el("select", { name: "isolation" },
    info.tiers.filter((t) => t.available).map((t) => el("option", { value: t.name, selected: t.default }, t.name)));
  const ttlIn = el("input", { name: "ttl", type: "number", min: "-1", value: "600", size: "6" });
  const cpu = el("input", { name: "cpu", type: "number", step: "0.25", min: "0", placeholder: String(info.defaults.cpu), size: "5" });
  const mem = el("input", { name: "memory", type: "number", min: "0", placeholder: String(info.defaults.memory_mb), size: "6" });
  const disk = el("input", { name: "disk", type: "number", min: "0", placeholder: String(info.defaults.disk_mb), size: "6" });
  const egress = el("select", { name: "egress" }, ["none", "internet"].map((e) => el("option", { value: e }, e)));
  const form = el("form", { class: "inline", id: "create" },
    field("Template", tpl), field("Tier", tier), field("TTL (s, -1 none)", ttlIn),
    field("CPU", cpu), field("Memory MB", mem), field("Disk MB", disk), field("Egress", egress),
    el("button", { class: "primary", type: "submit", id: "create-button" }, "Create sandbox"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const req = { template: tpl.value, isolation: tier.value, ttl_seconds: Number(ttlIn.value) || 0 };
    if (cpu.value) req.cpu = Number(cpu.value);
    if (mem.value) req.memory_mb = Number(mem.value);
    if (disk.value) req.disk_mb = Number(disk.value);
    if (egress.value !== "none") req.network = { egress: egress.value };
    const btn = document.getElementById("create-button");
    btn.disabled = true; btn.textContent = "Creating...";
    act(() => api("POST", "/v1/sandboxes", { json: req }));
  });
  return form;
}

function actionButtons(sb) {
  const b = (label, fn, cls) => el("button", { type: "button", class: cls, "data-action": label.toLowerCase(), onclick: () => act(fn) }, label);
  const out = [];
  if (sb.state === "running") out.push(b("Pause", () => api("POST", sbPath(sb.id, "/pause"))));
  if (sb.state === "paused") out.push(b("Resume", () => api("POST", sbPath(sb.id, "/resume"))));
  if (sb.state === "running" || sb.state === "paused") {
    out.push(b("Snapshot", () => {
      const name = prompt("Snapshot name (optional)") || undefined;
      return api("POST", sbPath(sb.id, "/snapshots"), { json: name ? { name } : {} });
    }));
    out.push(b("Fork", () => api("POST", sbPath(sb.id, "/fork"), { json: { count: 1 } })));
    out.push(b("Reset", () => confirm("Reset " + sb.id + " to its template?") && api("POST", sbPath(sb.id, "/reset"), { json: {} })));
  }
  if (sb.state !== "destroyed") {
    out.push(b("Destroy", async () => {
      if (!confirm("Destroy " + sb.id + "?")) return;
      await api("DELETE", sbPath(sb.id));
      sessionStorage.removeItem("agentbox.pty." + sb.id);
      if (location.hash.startsWith("#/sandbox/")) location.hash = "#/sandboxes";
    }, "danger"));
  }
  return out;
}

// ---- one sandbox -----------------------------------------------------------

const TABS = ["terminal", "files", "processes", "egress", "previews", "desktop", "usage"];

async function renderSandbox(id, tab) {
  const sb = await api("GET", sbPath(id));
  const tabs = el("div", { class: "tabs" }, TABS.map((t) =>
    el("a", { href: "#/sandbox/" + id + "/" + t, class: t === tab ? "on" : "", "data-tab": t }, t[0].toUpperCase() + t.slice(1))));
  const body = el("div", { id: "tab" });
  main.replaceChildren(
    el("h1", {}, "Sandbox ", el("span", { class: "mono" }, sb.id)),
    el("p", {},
      el("span", { class: "state-" + sb.state, id: "sb-state" }, sb.state), " · ", sb.template + "@" + (sb.template_version || "").slice(0, 12),
      " · ", sb.isolation, " · created ", age(sb.created_at), " ago · TTL ", ttl(sb),
      sb.parent ? " · forked from " + sb.parent : "", sb.error ? el("span", { class: "bad" }, " · " + sb.error) : ""),
    el("div", {}, actionButtons(sb)),
    tabs, body);
  const fn = { terminal: tabTerminal, files: tabFiles, processes: tabProcesses, egress: tabEgress, previews: tabPreviews, desktop: tabDesktop, usage: tabUsage }[tab];
  if (fn) await fn(sb, body);
}

// The terminal: xterm.js over the PTY's WebSocket. The PTY's pid is kept
// in sessionStorage, so a reload reattaches (the guest replays the recent
// screen) instead of starting another shell.
let termSession = null;

function closeTerminal() {
  if (!termSession) return;
  termSession.closing = true;
  try { termSession.ws && termSession.ws.close(); } catch (_) { /* closed */ }
  termSession.ro && termSession.ro.disconnect();
  termSession.term.dispose();
  termSession = null;
}

async function loadXterm() {
  try {
    const [x, f] = await Promise.all([import("./xterm/xterm.mjs"), import("./xterm/addon-fit.mjs")]);
    return { Terminal: x.Terminal, FitAddon: f.FitAddon };
  } catch (_) {
    return null;
  }
}

async function tabTerminal(sb, body) {
  if (sb.state !== "running") {
    body.append(el("p", { class: "note" }, "The sandbox is " + sb.state + "; a terminal needs it running."));
    return;
  }
  const xt = await loadXterm();
  if (!xt) {
    body.append(el("p", { class: "bad", id: "terminal-missing" }, "terminal assets missing: run make build"));
    return;
  }
  const status = el("span", { class: "note", id: "terminal-status" }, "connecting...");
  const host = el("div", { id: "terminal" });
  const storeKey = "agentbox.pty." + sb.id;
  body.append(el("div", {},
    el("button", { type: "button", onclick: () => act(async () => {
      const old = sessionStorage.getItem(storeKey);
      sessionStorage.removeItem(storeKey);
      if (old) await api("DELETE", sbPath(sb.id, "/pty/" + old)).catch(() => {});
    }) }, "Restart terminal"), " ", status), host);

  const term = new xt.Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000 });
  const fit = new xt.FitAddon();
  term.loadAddon(fit);
  term.open(host);
  fit.fit();
  const sess = { term, ws: null, ro: null, closing: false };
  termSession = sess;

  let pid = sessionStorage.getItem(storeKey);
  if (pid) {
    const list = await api("GET", sbPath(sb.id, "/pty"));
    const s = list.sessions.find((x) => String(x.pid) === pid && x.state !== "exited");
    if (!s) pid = null;
  }
  if (!pid) {
    const s = await api("POST", sbPath(sb.id, "/pty"), { json: { cols: term.cols, rows: term.rows } });
    pid = String(s.pid);
    sessionStorage.setItem(storeKey, pid);
  }
  const wsPath = sbPath(sb.id, "/pty/" + pid + "/ws");
  const t = await api("POST", "/v1/tickets", { json: { path: wsPath } });
  if (sess.closing) return;
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(proto + "//" + location.host + wsPath + "?ticket=" + encodeURIComponent(t.ticket));
  ws.binaryType = "arraybuffer";
  sess.ws = ws;
  const enc = new TextEncoder();
  const sendSize = () => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
  };
  ws.onopen = () => {
    status.textContent = "connected to pty " + pid;
    host.dataset.size = term.cols + "x" + term.rows;
    host.dataset.connected = "true";
    sendSize();
    term.focus();
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data === "string") {
      try {
        const c = JSON.parse(ev.data);
        if (c.type === "exit") {
          sessionStorage.removeItem(storeKey);
          term.write("\r\n[the program exited" + (c.exit_code != null ? " with code " + c.exit_code : "") + (c.signal ? " on " + c.signal : "") + "]\r\n");
          status.textContent = "exited; Restart terminal starts another";
        }
      } catch (_) { /* ignore unknown control frames */ }
      return;
    }
    term.write(new Uint8Array(ev.data));
  };
  ws.onclose = () => {
    host.dataset.connected = "false";
    if (!sess.closing && status.textContent.startsWith("connected")) status.textContent = "disconnected; reload to reattach";
  };
  term.onData((d) => { if (ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d)); });
  term.onBinary((d) => {
    if (ws.readyState !== WebSocket.OPEN) return;
    const b = new Uint8Array(d.length);
    for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 0xff;
    ws.send(b);
  });
  term.onResize(() => { host.dataset.size = term.cols + "x" + term.rows; sendSize(); });
  sess.ro = new ResizeObserver(() => { try { fit.fit(); } catch (_) { /* detached */ } });
  sess.ro.observe(host);
}

// Files: browse, view, download, upload (drag and drop or a picker).
async function tabFiles(sb, body) {
  const dirKey = "agentbox.dir." + sb.id;
  let dir = sessionStorage.getItem(dirKey) || "/";
  const go = (d) => { sessionStorage.setItem(dirKey, d); route(); };
  const join = (name) => (dir.endsWith("/") ? dir : dir + "/") + name;
  const list = await api("GET", sbPath(sb.id, "/files/list?path=" + encodeURIComponent(dir)));
  const view = el("div", { id: "file-view" });
  const download = async (p) => {
    const r = await api("GET", sbPath(sb.id, "/files?path=" + encodeURIComponent(p)), { raw: true });
    const url = URL.createObjectURL(await r.blob());
    const a = el("a", { href: url, download: p.split("/").pop() });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  };
  const viewText = async (p) => {
    const r = await api("GET", sbPath(sb.id, "/files?path=" + encodeURIComponent(p)), { raw: true });
    const buf = await r.arrayBuffer();
    const shown = buf.slice(0, 1 << 20);
    const text = new TextDecoder("utf-8", { fatal: false }).decode(shown);
    view.replaceChildren(el("h2", {}, p, buf.byteLength > shown.byteLength ? " (first 1 MiB)" : ""), el("pre", { class: "view", id: "file-text" }, text));
  };
  const dirFirst = (a, b) => (b.type === "dir") - (a.type === "dir") || a.name.localeCompare(b.name);
  const rows = list.entries.sort(dirFirst).map((f) => el("tr", { "data-name": f.name },
    el("td", { class: "mono" }, f.type === "dir" ? el("a", { href: "#", onclick: (e) => { e.preventDefault(); go(f.path || join(f.name)); } }, f.name + "/") : f.name),
    el("td", {}, f.type), el("td", {}, f.type === "dir" ? "" : bytes(f.size)), el("td", { class: "mono" }, f.mode),
    el("td", {}, age(f.mtime) + " ago"),
    el("td", {}, f.type === "file" ? [
      el("button", { type: "button", onclick: () => viewText(f.path || join(f.name)).catch(showError) }, "View"),
      el("button", { type: "button", onclick: () => download(f.path || join(f.name)).catch(showError) }, "Download")] : "",
    el("button", { type: "button", class: "danger", onclick: () => confirm("Delete " + (f.path || join(f.name)) + "?") && act(() => api("DELETE", sbPath(sb.id, "/files?path=" + encodeURIComponent(f.path || join(f.name)) + (f.type === "dir" ? "&recursive=true" : "")))) }, "Delete"))));
  const upload = async (files) => {
    showError(null);
    try {
      for (const file of files) {
        await api("PUT", sbPath(sb.id, "/files?path=" + encodeURIComponent(join(file.name))), { body: file, headers: { "Content-Type": "application/octet-stream" } });
      }
    } catch (e) { showError(e); return; }
    route();
  };
  const picker = el("input", { type: "file", multiple: true, id: "upload" });
  picker.addEventListener("change", () => upload([...picker.files]));
  const drop = el("div", { id: "dropzone" }, "Drop files here to upload them to ", el("span", { class: "mono" }, dir), " or ", picker);
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); upload([...e.dataTransfer.files]); });
  const pathIn = el("input", { value: dir, size: "40", id: "dir" });
  const parent = dir === "/" ? "/" : dir.replace(/\/+$/, "").replace(/\/[^/]*$/, "") || "/";
  body.append(
    el("form", { class: "inline", onsubmit: (e) => { e.preventDefault(); go(pathIn.value || "/"); } },
      field("Directory", pathIn), el("button", { type: "submit" }, "Open"),
      el("button", { type: "button", onclick: () => go(parent) }, "Up"),
      el("button", { type: "button", onclick: () => { const n = prompt("New directory name"); if (n) act(() => api("POST", sbPath(sb.id, "/files/mkdir"), { json: { path: join(n) } })); } }, "New directory")),
    drop,
    table(["Name", "Type", "Size", "Mode", "Modified", ""], rows),
    view);
}

// Processes: the background processes and their output; start one.
async function tabProcesses(sb, body) {
  const list = await api("GET", sbPath(sb.id, "/processes"));
  const out = el("div", { id: "proc-output" });
  const dec = (b64) => { try { return new TextDecoder().decode(Uint8Array.from(atob(b64 || ""), (c) => c.charCodeAt(0))); } catch (_) { return ""; } };
  const logs = async (p) => {
    const o = await api("GET", sbPath(sb.id, "/processes/" + p.pid + "/output"));
    out.replaceChildren(el("h2", {}, "Output of " + p.pid + " (" + o.state + ")"),
      el("h2", {}, "stdout"), el("pre", { class: "view" }, dec(o.stdout)),
      el("h2", {}, "stderr"), el("pre", { class: "view" }, dec(o.stderr)));
  };
  const cmd = el("input", { size: "50", placeholder: "python3 -m http.server 8000", id: "proc-cmd" });
  const tag = el("input", { size: "10", placeholder: "tag" });
  const form = el("form", { class: "inline" }, field("Command (sh -c)", cmd), field("Tag", tag),
    el("button", { class: "primary", type: "submit" }, "Start"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const req = { cmd: ["sh", "-c", cmd.value] };
    if (tag.value) req.tag = tag.value;
    act(() => api("POST", sbPath(sb.id, "/processes"), { json: req }));
  });
  body.append(form, table(["PID", "Tag", "Command", "State", "Exit", "Started", ""],
    list.processes.map((p) => el("tr", {},
      el("td", { class: "mono" }, p.pid), el("td", {}, p.tag || ""), el("td", { class: "mono" }, (p.cmd || []).join(" ")),
      el("td", {}, p.state), el("td", {}, p.exit_code ?? p.signal ?? ""), el("td", {}, age(p.started_at) + " ago"),
      el("td", {}, el("button", { type: "button", onclick: () => logs(p).catch(showError) }, "Logs"),
        p.state === "running" ? el("button", { type: "button", class: "danger", onclick: () => act(() => api("DELETE", sbPath(sb.id, "/processes/" + p.pid))) }, "Kill") : "")))),
  out);
}

async function tabEgress(sb, body) {
  const log = await api("GET", sbPath(sb.id, "/egress/log"));
  body.append(
    el("p", { class: "note" }, "Egress policy: " + ((sb.network && sb.network.egress) || "none") +
      (log.dropped ? "; " + log.dropped + " older entries dropped" : "")),
    table(["Time", "Kind", "Proto", "Destination", "Name", "Verdict", "Reason"],
      log.entries.map((e) => el("tr", {}, el("td", {}, new Date(e.time).toLocaleTimeString()), el("td", {}, e.kind),
        el("td", {}, e.proto), el("td", { class: "mono" }, e.dest), el("td", { class: "mono" }, e.name || e.qtype || ""),
        el("td", {}, e.verdict), el("td", {}, e.reason)))));
}

// Previews: links to the sandbox's preview URLs (host form), with the
// preview token when the sandbox has one.
async function tabPreviews(sb, body) {
  const n = sb.network || {};
  const portsKey = "agentbox.ports." + sb.id;
  const ports = JSON.parse(sessionStorage.getItem(portsKey) || "[]");
  const url = (p) => {
    if (!n.preview_domain) return location.origin + sbPath(sb.id, "/ports/" + p + "/") + (n.preview_token ? "?agentbox_token=" + encodeURIComponent(n.preview_token) : "");
    return location.protocol + "//" + p + "-" + sb.id + "." + n.preview_domain + "/" + (n.preview_token ? "?agentbox_token=" + encodeURIComponent(n.preview_token) : "");
  };
  const portIn = el("input", { type: "number", min: "1", max: "65535", placeholder: "8000" });
  const form = el("form", { class: "inline" }, field("Port", portIn), el("button", { type: "submit" }, "Add link"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const p = Number(portIn.value);
    if (p > 0 && !ports.includes(p)) { ports.push(p); sessionStorage.setItem(portsKey, JSON.stringify(ports)); }
    route();
  });
  body.append(el("p", { class: "note" }, "A server listening in the sandbox on a port is reachable at its preview URL (access: " + (n.preview || "token") + ")."),
    form, el("ul", { id: "previews" }, ports.map((p) => el("li", {}, el("a", { href: url(p), target: "_blank", rel: "noopener noreferrer" }, url(p))))));
}

// The desktop (the desktop template's X display): start it, see its
// screen, and open the live view (noVNC through the preview proxy, with
// the sandbox's token) view-only or interactive in a new tab.
async function tabDesktop(sb, body) {
  const d = await api("GET", sbPath(sb.id, "/desktop"));
  if (d.state !== "running") {
    const start = el("button", { id: "desktop-start" }, "Start the display");
    start.addEventListener("click", () => act(async () => {
      start.disabled = true;
      await api("POST", sbPath(sb.id, "/desktop"), { json: {} });
    }));
    body.append(el("p", { class: "note", id: "desktop-state" }, "The display is " + d.state + (d.error ? ": " + d.error : "") +
      ". A sandbox of the desktop template has one (docs/desktop.md)."), start);
    return;
  }
  const [view, drive] = await Promise.all([true, false].map((v) => api("GET", sbPath(sb.id, "/desktop/stream?view_only=" + v))));
  const link = (id, s, text) => el("a", { id, href: s.url, target: "_blank", rel: "noopener noreferrer" }, text);
  const img = el("img", { id: "desktop-shot", class: "shot", alt: "the sandbox's screen" });
  const load = async () => {
    const r = await api("GET", sbPath(sb.id, "/desktop/screenshot?format=png"), { raw: true });
    const old = img.src;
    img.src = URL.createObjectURL(await r.blob());
    img.dataset.shots = String(Number(img.dataset.shots || 0) + 1);
    if (old) URL.revokeObjectURL(old);
  };
  const refresh = el("button", { id: "desktop-refresh" }, "Refresh");
  refresh.addEventListener("click", () => { showError(null); load().catch(failed); });
  body.append(el("p", {}, d.width + "x" + d.height + " on display " + d.display + " · live view: ",
    link("live-view", view, "view only"), " · ", link("live-view-interactive", drive, "interactive")), refresh, el("div", {}, img));
  await load();
}

// chart draws values (oldest first) as an SVG line, labelled with the
// last value and the peak.
function chart(id, label, values, fmt) {
  const NS = "http://www.w3.org/2000/svg", w = 360, h = 64;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", "0 0 " + w + " " + h);
  svg.setAttribute("width", String(w));
  svg.setAttribute("height", String(h));
  svg.setAttribute("class", "chart-line");
  svg.id = id;
  svg.dataset.points = String(values.length);
  if (values.length === 1) values = [values[0], values[0]]; // a flat line
  const peak = Math.max(0, ...values);
  const y = (v) => (h - 2 - (peak > 0 ? v / peak : 0) * (h - 4)).toFixed(1);
  const x = (i) => (values.length > 1 ? i * w / (values.length - 1) : w / 2).toFixed(1);
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", values.map((v, i) => x(i) + "," + y(v)).join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "currentColor");
  line.setAttribute("stroke-width", "1.5");
  svg.append(line);
  return el("figure", { class: "chart" }, svg,
    el("figcaption", {}, label + ": " + fmt(values[values.length - 1]) + " now, " + fmt(peak) + " at most"));
}

async function tabUsage(sb, body) {
  const m = await api("GET", sbPath(sb.id, "/metrics"));
  const last = m.samples[m.samples.length - 1];
  if (!last) {
    body.append(el("p", { class: "note" }, "No usage sample yet."));
    return;
  }
  body.append(table(["When", "CPU %", "Memory", "Disk", "Rx", "Tx", "Pids"], [el("tr", {},
    el("td", {}, age(last.time) + " ago"), el("td", {}, last.cpu_percent.toFixed(1)), el("td", {}, bytes(last.memory_bytes) + " of " + m.limits.memory_mb + " MB"),
    el("td", {}, bytes(last.disk_bytes)), el("td", {}, bytes(last.rx_bytes)), el("td", {}, bytes(last.tx_bytes)), el("td", {}, last.pids))]));
  // The last hour, one sample every interval_seconds.
  const col = (k) => m.samples.map((s) => s[k]);
  const minutes = Math.round(m.samples.length * m.interval_seconds / 60);
  body.append(el("p", { class: "note" }, "The last " + (minutes || 1) + " min, one sample every " + m.interval_seconds + " s:"),
    el("div", { class: "charts" },
      chart("chart-cpu", "CPU", col("cpu_percent"), (v) => v.toFixed(1) + " %"),
      chart("chart-memory", "Memory", col("memory_bytes"), bytes),
      chart("chart-disk", "Disk", col("disk_bytes"), bytes),
      chart("chart-pids", "Processes", col("pids"), (v) => String(v))));
}

// ---- templates, snapshots, admin -------------------------------------------

async function renderTemplates() {
  const t = await api("GET", "/v1/templates");
  main.replaceChildren(el("h1", {}, "Templates"), table(["Name", "Version", "Size", "Source", "Tenant", "Created"],
    t.templates.map((x) => el("tr", {}, el("td", {}, x.name), el("td", { class: "mono" }, (x.version || "").slice(0, 12)),
      el("td", {}, bytes(x.size_bytes)), el("td", { class: "mono" }, x.source || ""), el("td", {}, x.tenant || "public"),
      el("td", {}, age(x.created_at) + " ago")))));
}

async function renderSnapshots() {
  const s = await api("GET", "/v1/snapshots");
  main.replaceChildren(el("h1", {}, "Snapshots"), table(["ID", "Name", "From sandbox", "Template", "Size", "Created", ""],
    s.snapshots.map((x) => el("tr", {}, el("td", { class: "mono" }, x.id), el("td", {}, x.name || ""), el("td", { class: "mono" }, x.sandbox_id),
      el("td", {}, x.template), el("td", {}, bytes(x.size_bytes)), el("td", {}, age(x.created_at) + " ago"),
      el("td", {}, el("button", { type: "button", onclick: () => act(async () => { await api("POST", "/v1/sandboxes", { json: { snapshot: x.id } }); location.hash = "#/sandboxes"; }) }, "Create sandbox"),
        el("button", { type: "button", class: "danger", onclick: () => confirm("Delete snapshot " + x.id + "?") && act(() => api("DELETE", "/v1/snapshots/" + encodeURIComponent(x.id))) }, "Delete"))))));
}

async function renderAdmin() {
  if (!isAdmin) { main.replaceChildren(el("p", { class: "note" }, "Tenants and keys need an admin key.")); return; }
  const [tenants, keys] = await Promise.all([api("GET", "/v1/tenants"), api("GET", "/v1/keys")]);
  const secret = el("div", { id: "new-secret" });
  const tName = el("input", { placeholder: "tenant name", size: "16" });
  const tForm = el("form", { class: "inline" }, field("New tenant", tName), el("button", { type: "submit" }, "Create tenant"));
  tForm.addEventListener("submit", (e) => { e.preventDefault(); act(() => api("POST", "/v1/tenants", { json: { name: tName.value } })); });
  const kTenant = el("select", {}, tenants.tenants.map((t) => el("option", { value: t.name }, t.name)));
  const kName = el("input", { placeholder: "key name", size: "16" });
  const kAdmin = el("input", { type: "checkbox" });
  const kForm = el("form", { class: "inline" }, field("Tenant", kTenant), field("Key name", kName), field("Admin", kAdmin),
    el("button", { type: "submit" }, "Create key"));
  kForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const k = await api("POST", "/v1/keys", { json: { tenant: kTenant.value, name: kName.value || undefined, admin: kAdmin.checked || undefined } });
      await renderAdmin();
      document.getElementById("new-secret").replaceChildren(el("p", { class: "secret" }, "New key " + k.id + " (shown once): ", el("span", { class: "mono" }, k.secret)));
    } catch (err) { showError(err); }
  });
  const quota = (t) => {
    const q = t.quotas, u = t.usage;
    return [["sandboxes", ""], ["cpu", ""], ["memory_mb", " MB"], ["disk_mb", " MB"], ["pids", ""]].map(([k, unit]) => k + " " + u[k] + "/" + (q[k] || "∞") + unit).join(", ");
  };
  const editQuota = (t) => act(async () => {
    const k = prompt("Quota to set (sandboxes, cpu, memory_mb, disk_mb, pids)", "sandboxes");
    if (!k) return;
    const v = prompt("New value for " + k + " (0: no limit)", String(t.quotas[k] ?? 0));
    if (v === null) return;
    await api("PATCH", "/v1/tenants/" + encodeURIComponent(t.name), { json: { quotas: { [k]: Number(v) } } });
  });
  main.replaceChildren(el("h1", {}, "Admin"),
    el("h2", {}, "Tenants"), tForm,
    table(["Name", "Usage / quotas", "Created", ""], tenants.tenants.map((t) => el("tr", {}, el("td", {}, t.name), el("td", {}, quota(t)),
      el("td", {}, age(t.created_at) + " ago"),
      el("td", {}, el("button", { type: "button", onclick: () => editQuota(t) }, "Set quota"),
        el("button", { type: "button", class: "danger", onclick: () => confirm("Delete tenant " + t.name + "?") && act(() => api("DELETE", "/v1/tenants/" + encodeURIComponent(t.name))) }, "Delete"))))),
    el("h2", {}, "API keys"), kForm, secret,
    table(["ID", "Tenant", "Name", "Admin", "Created", "Last used", ""], keys.keys.map((k) => el("tr", {},
      el("td", { class: "mono" }, k.id), el("td", {}, k.tenant), el("td", {}, k.name), el("td", {}, k.admin ? "yes" : ""),
      el("td", {}, age(k.created_at) + " ago"), el("td", {}, k.last_used_at ? age(k.last_used_at) + " ago" : ""),
      el("td", {}, k.revoked_at ? "revoked" : el("button", { type: "button", class: "danger", onclick: () => confirm("Revoke key " + k.id + "?") && act(() => api("DELETE", "/v1/keys/" + encodeURIComponent(k.id))) }, "Revoke"))))));
}

// ---- routing ---------------------------------------------------------------

let refresh = null;
let rendering = Promise.resolve();

async function render() {
  clearInterval(refresh);
  refresh = null;
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const signedIn = key() !== "";
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("signout").hidden = !signedIn;
  if (!signedIn || parts[0] === "signin") {
    closeTerminal();
    document.getElementById("who").textContent = "";
    renderSignIn();
    return;
  }
  const page = parts[0] || "sandboxes";
  // A re-render closes the terminal's socket; the new one reattaches to
  // the same PTY, which replays its recent screen.
  closeTerminal();
  try {
    if (page === "sandboxes") {
      await renderSandboxes();
      refresh = setInterval(() => { if (!document.querySelector("form#create :focus")) route(); }, 5000);
    } else if (page === "sandbox" && parts[1]) {
      await renderSandbox(parts[1], parts[2] || "terminal");
    } else if (page === "templates") await renderTemplates();
    else if (page === "snapshots") await renderSnapshots();
    else if (page === "admin") await renderAdmin();
    else main.replaceChildren(el("p", {}, "No such page."));
  } catch (e) {
    failed(e);
  }
}

// route renders the page the URL names, one render at a time.
function route() {
  rendering = rendering.then(render, render);
  return rendering;
}

document.getElementById("signout").addEventListener("click", () => signOut());
window.addEventListener("hashchange", () => { showError(null); route(); });
if (key()) probeAdmin().then(route); else route();
