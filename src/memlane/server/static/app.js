// memlane inspector: a read-only view of the /v1 API for one agent token.
//
// Safety rules this file keeps:
// * every stored string reaches the page through textContent / text nodes /
//   setAttribute, never innerHTML or any other HTML parser;
// * the token lives only in sessionStorage and the Authorization header: never
//   in a URL, a log line or the page.
"use strict";

(() => {
  const TOKEN_KEY = "memlane.inspector.token";
  const PAGE_SIZE = 25;

  const state = {
    token: null,
    me: null,
    browse: { ns: [], kp: "", levels: 1, cursor: null },
    seq: { tree: 0, items: 0, search: 0, item: 0 },
  };

  // -- DOM helpers (text only) ---------------------------------------------

  const $ = (sel) => document.querySelector(sel);

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = String(v);
      else if (k === "onclick") node.addEventListener("click", v);
      else if (k === "data") for (const [dk, dv] of Object.entries(v)) node.dataset[dk] = String(dv);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  // replace a node's children; null/false children (optional parts) are left out
  function fill(node, ...children) {
    node.replaceChildren(...children.flat().filter((c) => c !== undefined && c !== null && c !== false));
  }

  const show = (node, visible) => { node.hidden = !visible; };
  const nsText = (ns) => (ns && ns.length ? ns.join("/") : "");
  const segments = (kp) => (kp ? kp.split(".").length : 0);
  const pretty = (value) => {
    if (value === undefined) return "";
    try { return JSON.stringify(value, null, 2); } catch (e) { return String(value); }
  };
  const preview = (value, max = 80) => {
    return clip(value === undefined ? "" : JSON.stringify(value), max);
  };
  const clip = (s, max) => (s.length > max ? s.slice(0, max - 1) + "…" : s);
  const when = (iso) => (iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", " UTC") : "—");
  const fmtScore = (x) => (typeof x === "number" ? x.toPrecision(4) : "—");

  // -- the API -------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, type, message, field) {
      super(message);
      this.status = status;
      this.type = type;
      this.field = field;
    }
    describe() {
      const where = this.field ? ` (field: ${this.field})` : "";
      return this.status ? `${this.status} ${this.type}: ${this.message}${where}` : this.message;
    }
  }

  async function request(method, path, body, token = state.token) {
    const init = { method, headers: { Accept: "application/json" }, cache: "no-store", credentials: "omit" };
    if (token) init.headers.Authorization = "Bearer " + token;
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);  // relative: works under any mount path
    } catch (e) {
      throw new ApiError(0, "network", "could not reach the memlane service (or the token has characters a header cannot carry)");
    }
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) {
      const err = data && data.error ? data.error : {};
      throw new ApiError(response.status, err.type || "error", err.message || response.statusText || "request failed", err.field);
    }
    return data;
  }

  const api = (op, body) => request("POST", "v1/" + op, body || {});

  // -- errors --------------------------------------------------------------

  function showError(err) {
    if (err instanceof ApiError && err.status === 401 && state.token) {
      signOut("Your token is no longer accepted (401 unauthorized). Sign in again.");
      return;
    }
    $("#error-text").textContent = err instanceof ApiError ? err.describe() : String(err && err.message ? err.message : err);
    show($("#error"), true);
  }

  function clearError() {
    $("#error-text").textContent = "";
    show($("#error"), false);
  }

  // wraps an async UI action so any failure lands in the banner
  const guarded = (fn) => async (...args) => {
    try { await fn(...args); } catch (e) { showError(e); }
  };

  // -- signing in and out ----------------------------------------------------

  async function signIn(token) {
    const me = await request("GET", "v1/me", undefined, token);
    sessionStorage.setItem(TOKEN_KEY, token);
    state.token = token;
    state.me = me;
    $("#token").value = "";
    show($("#signin-error"), false);
    show($("#signin"), false);
    show($("#app"), true);
    show($("#signout"), true);
    renderMe(me);
    selectTab("browse");
    // signed in from here on: a failing first load shows in the banner, it does not sign out
    guarded(() => Promise.all([loadNamespaces(), browseTo([], "")]))();
  }

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.token = null;
    state.me = null;
    state.browse = { ns: [], kp: "", levels: Number($("#depth").value) || 1, cursor: null };
    for (const k of Object.keys(state.seq)) state.seq[k] += 1;  // drop answers still in flight
    for (const sel of ["#who", "#scope", "#ns-list", "#ns-count", "#crumbs", "#tree", "#items tbody",
                       "#hits tbody", "#search-summary", "#item"]) {
      $(sel).replaceChildren();
    }
    $("#q").value = "";
    $("#search-ns").value = "";
    for (const sel of ["#who", "#signout", "#app", "#item", "#hits", "#search-summary", "#more"]) show($(sel), false);
    clearError();
    const msg = $("#signin-error");
    msg.textContent = message || "";
    show(msg, Boolean(message));
    show($("#signin"), true);
    $("#token").focus();
  }

  function renderMe(me) {
    const who = $("#who");
    fill(who, 
      el("span", { class: "muted" }, "Signed in as "),
      el("strong", { id: "me-name", text: me.name }),
      me.admin ? el("span", { class: "badge admin", text: "admin" }) : null,
    );
    show(who, true);
    const list = (prefixes) => (prefixes && prefixes.length
      ? prefixes.map((p) => el("code", { class: "chip", text: p || "(everything)" }))
      : [el("span", { class: "muted", text: "—" })]);
    fill($("#scope"), 
      el("h2", { text: "Agent" }),
      el("dl", { class: "facts" },
        el("dt", { text: "Name" }), el("dd", { text: me.name }),
        el("dt", { text: "Namespace" }), el("dd", {}, el("code", { text: me.namespace })),
        el("dt", { text: "Rooms" }), el("dd", {}, list(me.rooms)),
        el("dt", { text: "Reads" }), el("dd", {}, list(me.read)),
        el("dt", { text: "Writes" }), el("dd", {}, list(me.write)),
      ),
    );
  }

  // -- tabs ----------------------------------------------------------------

  function selectTab(name) {
    for (const tab of ["browse", "search"]) {
      $("#tab-" + tab).setAttribute("aria-selected", String(tab === name));
      show($("#" + tab + "-view"), tab === name);
    }
    if (name === "search") $("#q").focus();
  }

  // -- namespaces ------------------------------------------------------------

  async function loadNamespaces() {
    const data = await api("namespaces", {});
    const list = $("#ns-list");
    const items = [el("li", {}, el("button", {
      type: "button", class: "ns all", data: { ns: "" }, onclick: guarded(() => browseTo([], "")),
    }, "All namespaces"))];
    for (const ns of data.namespaces) {
      items.push(el("li", {}, el("button", {
        type: "button", class: "ns", data: { ns: nsText(ns) }, title: nsText(ns),
        onclick: guarded(() => browseTo(ns, "")),
      }, nsText(ns))));
    }
    fill(list, ...items);
    $("#ns-count").textContent = String(data.namespaces.length);
    markActiveNamespace();
  }

  function markActiveNamespace() {
    const current = nsText(state.browse.ns);
    for (const b of document.querySelectorAll("#ns-list button.ns")) {
      b.classList.toggle("active", b.dataset.ns === current);
    }
  }

  // -- browsing: the summarize tree and the item list --------------------------

  async function browseTo(ns, kp) {
    clearError();
    // another namespace: the open item belongs to the one left behind, so its panel goes too
    if (nsText(ns) !== nsText(state.browse.ns)) closeItem();
    state.browse.ns = ns;
    state.browse.kp = kp;
    selectTab("browse");
    renderCrumbs();
    markActiveNamespace();
    await Promise.all([loadTree(), loadItems(true)]);
  }

  function renderCrumbs() {
    const { ns, kp } = state.browse;
    const parts = [el("button", { type: "button", class: "crumb", onclick: guarded(() => browseTo([], "")) }, "All")];
    ns.forEach((seg, i) => {
      parts.push(el("span", { class: "sep", text: "/" }));
      const target = ns.slice(0, i + 1);
      parts.push(el("button", { type: "button", class: "crumb", onclick: guarded(() => browseTo(target, "")) }, seg));
    });
    if (kp) {
      parts.push(el("span", { class: "sep key-sep", text: "›" }));
      kp.split(".").forEach((seg, i, all) => {
        if (i) parts.push(el("span", { class: "sep", text: "." }));
        const target = all.slice(0, i + 1).join(".");
        parts.push(el("button", { type: "button", class: "crumb key", onclick: guarded(() => browseTo(ns, target)) }, seg));
      });
    }
    fill($("#crumbs"), ...parts);
  }

  // Rows of one namespace's summary, asked one level deeper than shown (cut):
  // a path of at most `cut` segments is a whole key (a leaf you can open);
  // deeper paths fold into their first `cut` segments (a branch to drill into).
  // A key and a branch can share a path ("a.b" and "a.b.c"): both rows show.
  function treeRows(paths, cut) {
    const rows = new Map();
    for (const [path, count] of Object.entries(paths)) {
      const segs = path.split(".");
      const leaf = segs.length <= cut;
      const shown = leaf ? path : segs.slice(0, cut).join(".");
      const id = (leaf ? "k:" : "b:") + shown;
      const row = rows.get(id) || { path: shown, leaf, count: 0 };
      row.count += count;
      rows.set(id, row);
    }
    return [...rows.values()].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : Number(b.leaf) - Number(a.leaf)));
  }

  async function loadTree() {
    const seq = ++state.seq.tree;
    const { ns, kp, levels } = state.browse;
    const cut = segments(kp) + levels;
    const tree = $("#tree");
    fill(tree, el("p", { class: "muted", text: "Loading…" }));
    const data = await api("summarize", { namespace_prefix: ns, depth: cut + 1, key_prefix: kp });
    if (seq !== state.seq.tree) return;
    const groups = Object.entries(data.summary);
    if (!groups.length) {
      fill(tree, el("p", { class: "muted", text: "Nothing here." }));
      return;
    }
    const blocks = groups.map(([namespace, paths]) => {
      const target = namespace.split("/");
      const total = Object.values(paths).reduce((a, b) => a + b, 0);
      const rows = treeRows(paths, cut).map(({ path, leaf, count }) => {
        const shown = kp && path.startsWith(kp + ".") ? path.slice(kp.length + 1) : path;
        return el("li", { class: leaf ? "leaf" : "branch" },
          el("button", {
            type: "button", class: "path " + (leaf ? "leaf" : "branch"),
            data: { ns: namespace, path }, title: leaf ? "Open this item" : "Go deeper",
            onclick: guarded(() => (leaf ? openItem(target, path) : browseTo(target, path))),
          },
          el("span", { class: "icon", "aria-hidden": "true", text: leaf ? "•" : "▸" }),
          shown !== path ? el("span", { class: "dim", text: kp + "." }) : null,
          el("span", { text: shown })),
          el("span", { class: "count", text: leaf ? "key" : String(count) }),
        );
      });
      return el("section", { class: "tree-group", data: { ns: namespace } },
        el("h3", {},
          el("button", { type: "button", class: "ns-link", onclick: guarded(() => browseTo(target, "")) }, namespace),
          el("span", { class: "count", text: `${total} item${total === 1 ? "" : "s"}` })),
        el("ul", {}, rows),
      );
    });
    fill(tree, ...blocks);
  }

  async function loadItems(reset) {
    const seq = ++state.seq.items;
    const { ns, kp } = state.browse;
    if (reset) state.browse.cursor = null;
    const body = { namespace_prefix: ns, key_prefix: kp, limit: PAGE_SIZE };
    if (state.browse.cursor) body.cursor = state.browse.cursor;
    const page = await api("list", body);
    if (seq !== state.seq.items) return;
    const tbody = $("#items tbody");
    const rows = page.items.map((item) => el("tr", {},
      el("td", {}, el("code", { text: nsText(item.namespace) })),
      el("td", {}, el("button", {
        type: "button", class: "link item-link", data: { ns: nsText(item.namespace), key: item.key },
        onclick: guarded(() => openItem(item.namespace, item.key)),
      }, item.key)),
      el("td", { text: item.value_type }),
      el("td", { class: "num", text: String(item.version) }),
      el("td", { class: "when", text: when(item.updated_at) }),
      el("td", { text: item.author || "—" }),
    ));
    if (reset) fill(tbody, ...rows); else tbody.append(...rows);
    state.browse.cursor = page.next_cursor || null;
    show($("#items-empty"), tbody.children.length === 0);
    show($("#more"), Boolean(state.browse.cursor));
  }

  // -- one item and its history ------------------------------------------------

  async function openItem(ns, key) {
    const seq = ++state.seq.item;
    clearError();
    const address = { namespace: ns, key };
    const [item, history] = await Promise.all([api("get", address), api("history", address)]);
    if (seq !== state.seq.item) return;
    const facts = [
      ["Namespace", el("code", { text: nsText(item.namespace) })],
      ["Key", el("code", { text: item.key })],
      ["Type", item.value_type],
      ["Version", String(item.version)],
      ["Author", item.author || "—"],
      ["Created", when(item.created_at)],
      ["Updated", when(item.updated_at)],
      ["Expires", item.expires_at ? when(item.expires_at) : "never"],
      ["ID", el("code", { class: "small", text: item.id })],
    ];
    const versions = history.versions;
    const historyBlock = versions.length
      ? el("table", { id: "history", class: "grid compact" },
        el("thead", {}, el("tr", {},
          el("th", { class: "num", text: "Version" }), el("th", { text: "Change" }), el("th", { text: "Changed at" }),
          el("th", { text: "Changed by" }), el("th", { text: "Value" }))),
        el("tbody", {}, versions.map((ver) => el("tr", {},
          el("td", { class: "num", text: String(ver.version) }),
          el("td", {}, el("span", { class: "badge change-" + ver.change, text: ver.change })),
          el("td", { class: "when", text: when(ver.changed_at) }),
          el("td", { text: ver.changed_by || ver.author || "—" }),
          el("td", {}, el("details", {},
            el("summary", {}, el("code", { text: preview(ver.value, 48) })),
            el("pre", { class: "json", text: pretty(ver.value) }))),
        ))))
      : el("p", { id: "history-empty", class: "muted", text: "No earlier versions: this is the first." });

    const metadata = item.metadata && Object.keys(item.metadata).length ? item.metadata : null;
    fill($("#item"), 
      el("div", { class: "detail-head" },
        el("h2", {}, el("span", { class: "muted", text: nsText(item.namespace) + " / " }), el("span", { id: "item-key", text: item.key })),
        el("button", { type: "button", class: "link close", "aria-label": "Close item", onclick: closeItem }, "×")),
      el("dl", { class: "facts item-facts" }, facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)])),
      el("h3", { text: "Value" }),
      el("pre", { id: "item-value", class: "json", text: pretty(item.value) }),
      item.text && item.text !== item.value ? [el("h3", { text: "Indexed text" }), el("pre", { class: "text", text: item.text })] : null,
      el("h3", { text: "Metadata" }),
      metadata ? el("pre", { id: "item-metadata", class: "json", text: pretty(metadata) }) : el("p", { class: "muted", text: "None." }),
      el("h3", {}, "History ", el("span", { class: "count", text: String(versions.length) })),
      el("p", { class: "muted small", text: "Earlier versions, newest first (replaced, deleted or cleared)." }),
      historyBlock,
    );
    show($("#item"), true);
    $("#app").classList.add("with-detail");
  }

  function closeItem() {
    state.seq.item += 1;
    fill($("#item"));
    show($("#item"), false);
    $("#app").classList.remove("with-detail");
  }

  // -- search ------------------------------------------------------------------

  async function runSearch(event) {
    event.preventDefault();
    const seq = ++state.seq.search;
    clearError();
    // old results never stand under a new query, even when it fails
    fill($("#hits tbody"));
    for (const sel of ["#hits", "#hits-empty", "#search-summary"]) show($(sel), false);
    const query = $("#q").value;
    const prefix = $("#search-ns").value.trim().replace(/^\/+|\/+$/g, "");
    const env = await api("search", { query, namespace_prefix: prefix, limit: Number($("#search-limit").value) });
    if (seq !== state.seq.search) return;

    const channels = Object.keys(env.counts || {});
    for (const hit of env.hits) for (const ch of Object.keys(hit.ranks || {})) if (!channels.includes(ch)) channels.push(ch);

    const summary = $("#search-summary");
    const countChips = channels.length
      ? channels.map((ch) => el("span", { class: "chip", data: { channel: ch } }, `${ch}: ${env.counts[ch] ?? 0} nominated`))
      : [el("span", { class: "muted", text: "no channel ran" })];
    fill(summary, 
      el("div", { class: "summary-line" },
        el("strong", { id: "hit-count", text: `${env.hits.length} hit${env.hits.length === 1 ? "" : "s"}` }),
        env.truncated ? el("span", { class: "badge", text: "more beyond limit" }) : null,
        el("span", { class: "muted", text: "Counts:" }), countChips,
        el("span", { id: "dropped", class: "chip" }, `dropped by hydration: ${env.dropped_by_hydration}`),
        env.timings && typeof env.timings.total_ms === "number"
          ? el("span", { class: "muted small", text: `${env.timings.total_ms} ms` }) : null),
      env.notes && env.notes.length
        ? el("ul", { id: "notes", class: "notes" }, env.notes.map((n) => el("li", { text: n })))
        : null,
    );
    show(summary, true);

    const rows = env.hits.map((hit, i) => el("tr", {},
      el("td", { class: "num", text: String(i + 1) }),
      el("td", {}, el("code", { text: nsText(hit.namespace) })),
      el("td", {}, el("button", {
        type: "button", class: "link item-link", data: { ns: nsText(hit.namespace), key: hit.key },
        onclick: guarded(() => openItem(hit.namespace, hit.key)),
      }, hit.key), hit.text ? el("div", { class: "snippet", text: clip(hit.text, 120) }) : null),
      el("td", { class: "num score", text: fmtScore(hit.score) }),
      el("td", { class: "ranks" }, channels.map((ch) => {
        const rank = hit.ranks ? hit.ranks[ch] : undefined;
        const raw = hit.channel_scores ? hit.channel_scores[ch] : undefined;
        return el("span", {
          class: "rank" + (rank === undefined ? " missing" : ""), data: { channel: ch },
          title: rank === undefined ? `${ch} did not nominate this hit` : `${ch} raw score ${fmtScore(raw)}`,
        }, rank === undefined ? `${ch} —` : `${ch} #${rank}`);
      })),
      el("td", { text: hit.value_type }),
    ));
    fill($("#hits tbody"), ...rows);
    show($("#hits"), rows.length > 0);
    show($("#hits-empty"), rows.length === 0);
  }

  // -- wiring --------------------------------------------------------------------

  function init() {
    $("#signin-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const token = $("#token").value.trim();
      const msg = $("#signin-error");
      if (!token) {
        msg.textContent = "Enter a token.";
        show(msg, true);
        return;
      }
      try {
        await signIn(token);
      } catch (e) {
        $("#token").value = "";
        $("#token").focus();
        msg.textContent = e instanceof ApiError ? `Sign-in failed: ${e.describe()}` : String(e);
        show(msg, true);
      }
    });
    $("#signout").addEventListener("click", () => signOut());
    $("#error-close").addEventListener("click", clearError);
    $("#tab-browse").addEventListener("click", () => selectTab("browse"));
    $("#tab-search").addEventListener("click", () => selectTab("search"));
    $("#depth").addEventListener("change", guarded(async () => {
      state.browse.levels = Number($("#depth").value) || 1;
      await loadTree();
    }));
    $("#more").addEventListener("click", guarded(() => loadItems(false)));
    $("#search-form").addEventListener("submit", guarded(runSearch));

    const saved = sessionStorage.getItem(TOKEN_KEY);
    if (saved) {
      signIn(saved).catch((e) => {
        signOut(e instanceof ApiError && e.status === 401
          ? "Your saved token is no longer accepted. Sign in again."
          : `Could not sign in with the saved token: ${e instanceof ApiError ? e.describe() : e}`);
      });
    } else {
      signOut();
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
