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
  const TABS = ["browse", "search", "entities", "timeline"];
  const SVG = "http://www.w3.org/2000/svg";
  const PAGE_SIZE = 25;

  const state = {
    token: null,
    me: null,
    browse: { ns: [], kp: "", levels: 1, cursor: null },
    seq: { tree: 0, items: 0, search: 0, item: 0, entities: 0, entity: 0, timeline: 0 },
    hops: 1,
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
    state.hops = 1;
    for (const sel of ["#who", "#scope", "#ns-list", "#ns-count", "#crumbs", "#tree", "#items tbody",
                       "#hits tbody", "#search-summary", "#item", "#entities tbody", "#entity-count", "#entity",
                       "#timeline-plot", "#timeline-totals tbody"]) {
      $(sel).replaceChildren();
    }
    $("#q").value = "";
    $("#search-ns").value = "";
    for (const sel of ["#who", "#signout", "#app", "#item", "#hits", "#search-summary", "#more", "#entity"]) show($(sel), false);
    show($("#entity-list-block"), true);
    $("#tl-recalls-since").textContent = "—";
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
    for (const tab of TABS) {
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

  // -- the facts layer: entities, one entity's page -----------------------------
  //
  // Lists and tables come from the query space (POST /v1/query over the memory_v1 views, narrowed to the
  // agent's scope inside the views); an entity's record from /v1/lookup and its neighbourhood from
  // /v1/traverse.

  // one SELECT over the memory_v1 views; rows as objects
  async function query(sql, params) {
    const body = { sql, max_rows: 1000 };
    if (params) body.params = params;
    const res = await api("query", body);
    return res.rows.map((row) => Object.fromEntries(res.columns.map((c, i) => [c, row[i]])));
  }

  // the query space gives a json column as its JSON text
  const fromJson = (text) => {
    try { return JSON.parse(text); } catch (e) { return text; }
  };

  const ENTITIES_SQL = "SELECT e.id, e.namespace, e.kind, e.name, "
    + "(SELECT count(*) FROM facts_current f WHERE f.subject_id = e.id OR f.object_id = e.id) AS facts, "
    + "(SELECT count(*) FROM claim_entities ce WHERE ce.entity_id = e.id) AS claims "
    + "FROM entities e WHERE e.merged_into IS NULL ORDER BY e.name, e.id";
  const FACTS_SQL = "SELECT id, version, subject_id, subject_name, predicate, object_id, object_name, object_value, "
    + "valid_from, valid_to, recorded_at, retracted_at, evidence_count FROM facts "
    + "WHERE subject_id = :id OR object_id = :id ORDER BY recorded_at, id, version";
  const EVIDENCE_SQL = "SELECT fact_id, source, recorded_at FROM evidence "
    + "WHERE fact_id IN (SELECT id FROM facts WHERE subject_id = :id OR object_id = :id) ORDER BY recorded_at";
  const CLAIMS_SQL = "SELECT c.id, c.claim_text, c.speaker, c.asserted_at, c.superseded_at, c.chunk_id, "
    + "d.title, d.source, k.position, k.chunk_text FROM claims c JOIN claim_entities ce ON ce.claim_id = c.id "
    + "LEFT JOIN chunks k ON k.id = c.chunk_id LEFT JOIN documents d ON d.id = c.document_id "
    + "WHERE ce.entity_id = :id ORDER BY c.recorded_at, c.id";

  async function loadEntities() {
    const seq = ++state.seq.entities;
    closeEntity();
    const rows = await query(ENTITIES_SQL);
    if (seq !== state.seq.entities) return;
    fill($("#entities tbody"), rows.map((e) => el("tr", {},
      el("td", {}, el("button", {
        type: "button", class: "link entity-link", data: { id: e.id }, onclick: guarded(() => openEntity(e.id)),
      }, e.name)),
      el("td", {}, el("span", { class: "badge", text: e.kind })),
      el("td", {}, el("code", { text: e.namespace })),
      el("td", { class: "num", text: String(e.facts) }),
      el("td", { class: "num", text: String(e.claims) }),
    )));
    $("#entity-count").textContent = String(rows.length);
    show($("#entities-empty"), rows.length === 0);
  }

  function closeEntity() {
    state.seq.entity += 1;
    fill($("#entity"));
    show($("#entity"), false);
    show($("#entity-list-block"), true);
  }

  // a fact's state on its two clocks, now
  function factState(f, now) {
    if (f.retracted_at) return ["retracted", "belief ended " + when(f.retracted_at)];
    if (f.valid_to && f.valid_to <= now) return ["ended", "stopped holding " + when(f.valid_to)];
    if (f.valid_from && f.valid_from > now) return ["future", "holds from " + when(f.valid_from)];
    return ["current", "holds now"];
  }

  async function openEntity(id) {
    const seq = ++state.seq.entity;
    clearError();
    const hops = Number(state.hops || 1);
    const [looked, facts, evidence, claims, graph] = await Promise.all([
      api("lookup", { ids: [id] }),
      query(FACTS_SQL, { id }),
      query(EVIDENCE_SQL, { id }),
      query(CLAIMS_SQL, { id }),
      api("traverse", { entity_ids: [id], hops }),
    ]);
    if (seq !== state.seq.entity) return;
    const entity = looked.records[0];
    if (!entity) throw new ApiError(404, "not_found", `no entity ${id} that this agent may see`);
    const sources = new Map();
    for (const ev of evidence) {
      if (!sources.has(ev.fact_id)) sources.set(ev.fact_id, []);
      sources.get(ev.fact_id).push(ev.source || "(no source given)");
    }
    const now = new Date().toISOString();
    const named = (eid, name) => (eid === entity.id
      ? el("strong", { text: name })
      : el("button", { type: "button", class: "link entity-link", data: { id: eid }, onclick: guarded(() => openEntity(eid)) }, name));
    const factRows = facts.map((f) => {
      const [st, why] = factState(f, now);
      const object = f.object_id ? named(f.object_id, f.object_name || f.object_id) : el("code", { text: preview(fromJson(f.object_value), 60) });
      return el("tr", { class: "fact " + st, data: { fact: f.id, state: st } },
        el("td", {}, named(f.subject_id, f.subject_name || f.subject_id)),
        el("td", {}, el("code", { text: f.predicate })),
        el("td", {}, object),
        el("td", { class: "when", text: f.valid_from ? when(f.valid_from) : "—" }),
        el("td", { class: "when", text: f.valid_to ? when(f.valid_to) : "—" }),
        el("td", { class: "when", text: when(f.recorded_at) }),
        el("td", { class: "when", text: f.retracted_at ? when(f.retracted_at) : "—" }),
        el("td", { class: "sources" },
          el("span", { class: "num", text: String(f.evidence_count) }), " ",
          (sources.get(f.id) || []).map((src) => el("code", { class: "chip source", text: src }))),
        el("td", {}, el("span", { class: "badge state-" + st, title: why, text: st })),
      );
    });
    const claimRows = claims.map((c) => el("tr", { class: "claim", data: { claim: c.id } },
      el("td", {}, el("span", { class: "claim-text", text: c.claim_text }),
        c.superseded_at ? el("span", { class: "badge state-retracted", text: "superseded" }) : null),
      el("td", { text: c.speaker || "—" }),
      el("td", { class: "when", text: when(c.asserted_at) }),
      el("td", { class: "claim-source" },
        c.chunk_id
          ? [el("div", {}, el("strong", { class: "doc-title", text: c.title || "(untitled)" }),
              c.source ? [" ", el("code", { class: "chip source", text: c.source })] : null,
              el("span", { class: "muted small", text: ` passage ${c.position + 1}` })),
            el("blockquote", { class: "passage", text: clip(c.chunk_text || "", 240) })]
          : el("span", { class: "muted", text: "no source passage" })),
    ));
    const aliases = entity.aliases && entity.aliases.length
      ? entity.aliases.map((a) => el("code", { class: "chip", text: a })) : [el("span", { class: "muted", text: "—" })];
    const hopsSelect = el("select", { id: "graph-hops", "aria-label": "Hops" },
      [1, 2, 3].map((n) => el("option", { value: String(n), selected: n === hops }, `${n} hop${n === 1 ? "" : "s"}`)));
    hopsSelect.addEventListener("change", guarded(async () => { state.hops = Number(hopsSelect.value); await openEntity(id); }));
    fill($("#entity"),
      el("div", { class: "detail-head" },
        el("button", { id: "entity-back", type: "button", class: "link", onclick: closeEntity }, "← All entities")),
      el("h2", {}, el("span", { id: "entity-name", text: entity.name }), " ",
        el("span", { class: "badge", text: entity.kind })),
      el("dl", { class: "facts entity-facts" },
        el("dt", { text: "Namespace" }), el("dd", {}, el("code", { text: nsText(entity.namespace) })),
        el("dt", { text: "Aliases" }), el("dd", {}, aliases),
        el("dt", { text: "Profile" }), el("dd", { text: entity.profile || "—" }),
        el("dt", { text: "Created" }), el("dd", { text: when(entity.created_at) }),
        el("dt", { text: "ID" }), el("dd", {}, el("code", { class: "small", text: entity.id }))),
      el("h3", {}, "Neighbourhood ", hopsSelect),
      el("p", { class: "muted small", text: "Entities linked to this one by facts that hold now (the paths of POST /v1/traverse). Click a neighbour to open it." }),
      drawGraph(entity, graph.sections.paths || [], (eid) => openEntity(eid)),
      el("h3", {}, "Facts ", el("span", { class: "count", text: String(facts.length) })),
      el("p", { class: "muted small", text: "Every version of every fact about this entity, on both clocks: valid time (when it held in the world) and record time (when memlane believed it)." }),
      factRows.length
        ? el("table", { id: "entity-fact-table", class: "grid compact" },
          el("thead", {}, el("tr", {},
            ["Subject", "Predicate", "Object", "Valid from", "Valid to", "Recorded", "Retracted", "Evidence (sources)", "Now"]
              .map((h) => el("th", { text: h })))),
          el("tbody", {}, factRows))
        : el("p", { id: "entity-facts-empty", class: "muted", text: "No facts." }),
      el("h3", {}, "Claims ", el("span", { class: "count", text: String(claims.length) })),
      el("p", { class: "muted small", text: "What sources said about this entity, with the passage each claim came from." }),
      claimRows.length
        ? el("table", { id: "entity-claim-table", class: "grid compact" },
          el("thead", {}, el("tr", {}, ["Claim", "Speaker", "Asserted", "Source"].map((h) => el("th", { text: h })))),
          el("tbody", {}, claimRows))
        : el("p", { id: "entity-claims-empty", class: "muted", text: "No claims." }),
    );
    show($("#entity-list-block"), false);
    show($("#entity"), true);
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "text") node.textContent = String(v);
      else if (k === "onclick") node.addEventListener("click", v);
      else node.setAttribute(k, String(v));
    }
    for (const c of children.flat()) if (c) node.append(c);
    return node;
  }

  // The entity in the middle, entities one hop away on a ring around it, two hops on a wider ring, ...;
  // one line per fact between two entities, labelled with its predicate, an arrow toward its object.
  function drawGraph(entity, paths, open) {
    const hopOf = new Map([[entity.id, 0]]);
    const parentOf = new Map();
    const names = new Map([[entity.id, entity.name]]);
    const edges = new Map();
    for (const path of paths) {
      path.entities.forEach((eid, i) => {
        if (!hopOf.has(eid) || hopOf.get(eid) > i) {
          hopOf.set(eid, i);
          if (i) parentOf.set(eid, path.entities[i - 1]);
        }
        names.set(eid, path.names[i]);
      });
      for (const f of path.facts) edges.set(f.id, f);
    }
    const W = 760, H = 340, cx = W / 2, cy = H / 2;
    const maxHop = Math.max(1, ...hopOf.values());
    const byName = (a, b) => (names.get(a) < names.get(b) ? -1 : names.get(a) > names.get(b) ? 1 : 0);
    // one hop away: evenly round the entity, the first to its right; further: fanned out beyond the parent
    const angle = new Map([[entity.id, 0]]);
    const pos = new Map([[entity.id, [cx, cy]]]);
    const first = [...hopOf].filter(([, hop]) => hop === 1).map(([eid]) => eid).sort(byName);
    const slice = (2 * Math.PI) / Math.max(1, first.length);
    first.forEach((eid, i) => angle.set(eid, i * slice));
    for (let hop = 2; hop <= maxHop; hop += 1) {
      const children = new Map();
      for (const [eid, h] of hopOf) if (h === hop) (children.get(parentOf.get(eid)) || children.set(parentOf.get(eid), []).get(parentOf.get(eid))).push(eid);
      for (const [parent, kids] of children) {
        kids.sort(byName);
        const spread = Math.min(slice, Math.PI / 2) * 0.8;
        kids.forEach((eid, i) => angle.set(eid, angle.get(parent) + (kids.length === 1 ? 0.3 : spread * (i / (kids.length - 1) - 0.5))));
      }
    }
    for (const [eid, hop] of hopOf) {
      if (!hop) continue;
      const r = (hop / maxHop) * (H / 2 - 45);
      pos.set(eid, [cx + r * 1.7 * Math.cos(angle.get(eid)), cy + r * Math.sin(angle.get(eid))]);
    }
    const lines = [], labels = [];
    for (const f of edges.values()) {
      const a = pos.get(f.subject), b = pos.get(f.object);
      if (!a || !b) continue;
      lines.push(svg("line", { class: "edge", x1: a[0], y1: a[1], x2: b[0], y2: b[1], "marker-end": "url(#arrow)", "data-fact": f.id }));
      labels.push(svg("text", { class: "edge-label", x: (a[0] + b[0]) / 2, y: (a[1] + b[1]) / 2 - 4, "text-anchor": "middle", text: f.predicate }));
    }
    const nodes = [...pos].map(([eid, [x, y]]) => {
      const centre = eid === entity.id;
      return svg("g", { class: "node" + (centre ? " centre" : ""), "data-id": eid, "data-hop": hopOf.get(eid),
        transform: `translate(${x.toFixed(1)},${y.toFixed(1)})`, onclick: centre ? undefined : guarded(() => open(eid)) },
        svg("title", { text: centre ? names.get(eid) : `Open ${names.get(eid)}` }),
        svg("circle", { r: centre ? 16 : 11 }),
        svg("text", { y: centre ? 32 : 26, "text-anchor": "middle", text: clip(names.get(eid) || eid, 28) }));
    });
    const drawing = svg("svg", { id: "graph", class: "graph", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
      "aria-label": `${entity.name} and ${pos.size - 1} neighbour${pos.size === 2 ? "" : "s"}` },
      svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 22, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto-start-reverse" },
        svg("path", { class: "arrow", d: "M 0 0 L 10 5 L 0 10 z" }))),
      lines, labels, nodes);
    if (pos.size === 1) {
      drawing.append(svg("text", { class: "empty", x: cx, y: cy + 50, "text-anchor": "middle", text: "No entity is linked to this one by a fact that holds now." }));
    }
    return drawing;
  }

  // -- the timeline: writes and recalls per namespace (POST /v1/activity) ---------

  async function loadTimeline() {
    const seq = ++state.seq.timeline;
    const bucket = $("#tl-bucket").value;
    const data = await api("activity", { bucket, days: Number($("#tl-days").value) });
    if (seq !== state.seq.timeline) return;
    $("#tl-recalls-since").textContent = when(data.recalls_since);
    const byNs = new Map();
    for (const row of data.rows) (byNs.get(row.namespace) || byNs.set(row.namespace, []).get(row.namespace)).push(row);
    const totals = [...byNs].map(([ns, rows]) => [ns, Object.fromEntries(data.series.map((k) => [k, rows.reduce((a, r) => a + r[k], 0)]))]);
    fill($("#timeline-totals tbody"), totals.map(([ns, t]) => el("tr", { data: { ns } },
      el("td", {}, el("code", { text: ns })),
      data.series.map((k) => el("td", { class: "num", data: { series: k }, text: String(t[k]) })))));
    show($("#timeline-empty"), byNs.size === 0);
    fill($("#timeline-plot"), byNs.size ? drawTimeline(data, byNs) : null);
  }

  // One lane per namespace over the window: writes, deletes and facts stacked upward, recalls downward.
  function drawTimeline(data, byNs) {
    const step = data.bucket === "hour" ? 3600e3 : 86400e3;
    const t0 = Date.parse(data.since), t1 = Date.parse(data.until);
    const n = Math.max(1, Math.ceil((t1 - t0) / step));
    const LEFT = 150, RIGHT = 50, W = 900, LANE = 96, TOP = 10, AXIS = 26;
    const plotW = W - LEFT - RIGHT, bw = plotW / n;
    const H = TOP + LANE * byNs.size + AXIS;
    const x = (t) => LEFT + ((t - t0) / step) * bw;
    const lanes = [...byNs].map(([ns, rows], i) => {
      const top = TOP + i * LANE, mid = top + LANE * 0.6;
      const up = Math.max(1, ...rows.map((r) => r.writes + r.deletes + r.facts));
      const down = Math.max(1, ...rows.map((r) => r.recalls));
      const scale = Math.min((LANE * 0.55) / up, (LANE * 0.35) / down, (LANE * 0.55) / Math.max(up, down));
      const bars = [];
      for (const r of rows) {
        const bx = x(Date.parse(r.at)), w = Math.max(1.5, bw - 1);
        let y = mid;
        for (const k of ["writes", "deletes", "facts"]) {
          if (!r[k]) continue;
          const h = Math.max(1.5, r[k] * scale);
          y -= h;
          bars.push(svg("rect", { class: "bar " + k, x: bx.toFixed(1), y: y.toFixed(1), width: w.toFixed(1), height: h.toFixed(1) },
            svg("title", { text: `${ns} ${when(r.at)}: ${r[k]} ${k}` })));
        }
        if (r.recalls) {
          const h = Math.max(1.5, r.recalls * scale);
          bars.push(svg("rect", { class: "bar recalls", x: bx.toFixed(1), y: mid.toFixed(1), width: w.toFixed(1), height: h.toFixed(1) },
            svg("title", { text: `${ns} ${when(r.at)}: ${r.recalls} recalls` })));
        }
      }
      return svg("g", { class: "lane", "data-ns": ns },
        svg("line", { class: "baseline", x1: LEFT, x2: W - RIGHT, y1: mid, y2: mid }),
        svg("text", { class: "lane-label", x: LEFT - 8, y: mid + 4, "text-anchor": "end", text: clip(ns, 22) }),
        svg("text", { class: "lane-max", x: W - RIGHT + 6, y: mid - LANE * 0.45, text: `↑${up}` }),
        svg("text", { class: "lane-max", x: W - RIGHT + 6, y: mid + LANE * 0.3, text: `↓${down}` }),
        bars);
    });
    // ticks: each day (hour buckets over a few days) or a few dates (day buckets)
    const ticks = [];
    const dayStep = Math.max(1, Math.ceil(((t1 - t0) / 86400e3) / 8)) * 86400e3;
    for (let t = Math.ceil(t0 / 86400e3) * 86400e3; t <= t1; t += dayStep) {
      ticks.push(svg("line", { class: "tick", x1: x(t), x2: x(t), y1: TOP, y2: H - AXIS + 4 }),
        svg("text", { class: "tick-label", x: x(t), y: H - 8, "text-anchor": "middle", text: new Date(t).toISOString().slice(5, 10) }));
    }
    return svg("svg", { id: "timeline-svg", class: "timeline", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
      "aria-label": `writes and recalls per ${data.bucket} for ${byNs.size} namespace${byNs.size === 1 ? "" : "s"}` },
    ticks, lanes);
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
    $("#tab-entities").addEventListener("click", guarded(async () => { selectTab("entities"); await loadEntities(); }));
    $("#tab-timeline").addEventListener("click", guarded(async () => { selectTab("timeline"); await loadTimeline(); }));
    for (const sel of ["#tl-bucket", "#tl-days"]) $(sel).addEventListener("change", guarded(loadTimeline));
    $("#tl-refresh").addEventListener("click", guarded(loadTimeline));
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
