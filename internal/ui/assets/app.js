// rbscope ui: renders the server's JSON views. The state of a view is all
// in the URL's fragment (#/heap/0/overview?by=class&sort=retained), so a
// link can be shared; every value from a dump is set as text, never as
// markup.
"use strict";

const csrf = document.querySelector('meta[name="csrf-token"]').content;
const view = document.getElementById("view");
const crumbs = document.getElementById("crumbs");
let generation = 0; // the render under way; older ones drop their answers

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat(Infinity)) {
    if (k === undefined || k === null) continue;
    e.append(k instanceof Node ? k : String(k));
  }
  return e;
}

function num(n) { return Number(n).toLocaleString("en-US"); }
function bytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, v = Number(n);
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v : v.toFixed(1)) + " " + u[i];
}
function pct(v) { return Number(v).toFixed(2) + "%"; }

function hashFor(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== "") q.set(k, v);
  const s = q.toString();
  return "#" + path + (s ? "?" + s : "");
}

function route() {
  const h = location.hash.replace(/^#/, "") || "/";
  const [path, qs] = h.split("?", 2);
  return { parts: path.split("/").filter(Boolean), params: Object.fromEntries(new URLSearchParams(qs || "")) };
}

async function post(path, params) {
  const q = new URLSearchParams(params);
  const r = await fetch("/api/" + path + "?" + q.toString(), { method: "POST", credentials: "same-origin", headers: { "X-CSRF-Token": csrf } });
  const body = await r.json().catch(() => ({ error: "the server's answer is not JSON (" + r.status + ")" }));
  if (!r.ok || body.error) throw new Error(body.error || ("HTTP " + r.status));
  return body;
}

async function api(path, params) {
  const q = new URLSearchParams(params);
  const r = await fetch("/api/" + path + "?" + q.toString(), { credentials: "same-origin" });
  const body = await r.json().catch(() => ({ error: "the server's answer is not JSON (" + r.status + ")" }));
  if (!r.ok || body.error) throw new Error(body.error || ("HTTP " + r.status));
  return body;
}

function show(gen, state, ...nodes) {
  if (gen !== generation) return;
  view.replaceChildren(...nodes.flat().filter(n => n !== null && n !== undefined));
  view.dataset.state = state;
  view.dataset.route = location.hash;
}

function setCrumbs(...items) {
  crumbs.replaceChildren(...items.map(([label, href]) => href ? el("a", { href }, label) : el("span", {}, label)));
}

function pager(pg, limit, base, params, key) {
  const off = pg.offset, total = pg.total;
  const nav = el("div", { class: "pager" });
  if (total === 0) return nav;
  nav.append(`${num(off + 1)}–${num(Math.min(total, off + limit))} of ${num(total)} `);
  if (off > 0) nav.append(el("a", { href: hashFor(base, { ...params, [key]: Math.max(0, off - limit) }), class: "prev" }, "← previous"));
  if (off + limit < total) nav.append(" ", el("a", { href: hashFor(base, { ...params, [key]: off + limit }), class: "next" }, "next →"));
  return nav;
}

function table(cols, rows, opts) {
  const head = el("tr", {}, cols.map(c => {
    const th = el("th", { class: c.num ? "num" : "" });
    if (c.sort && opts && opts.sortHref) {
      th.append(el("a", { href: opts.sortHref(c.sort), class: opts.sorted === c.sort ? "sorted" : "" }, c.label));
    } else th.append(c.label);
    return th;
  }));
  const body = rows.map(r => el("tr", {}, cols.map(c => el("td", { class: (c.num ? "num " : "") + (c.cls || "") }, c.cell(r)))));
  return el("table", { id: (opts && opts.id) || "rows" }, el("thead", {}, head), el("tbody", {}, body));
}

// genName names an overview row by GC generation.
function genName(r) { return r.generation === undefined ? "(before tracing)" : "generation " + r.generation; }

function objLink(f, o) { return el("a", { href: hashFor(`/heap/${f}/object`, { addr: o.address }), class: "addr" }, o.address); }

const objectCols = f => [
  { label: "Address", cell: o => objLink(f, o) },
  { label: "Type", cell: o => o.type },
  { label: "Class", cell: o => o.class || "(none)" },
  { label: "Description", cell: o => o.desc, cls: "desc" },
  { label: "Self", num: true, cell: o => num(o.memsize) },
  { label: "Retained", num: true, cell: o => o.reachable === false ? "unreachable" : num(o.retained) },
  { label: "Ret. count", num: true, cell: o => num(o.retained_count) },
];

function dumpHead(d) {
  return el("p", { class: "summary" }, `${d.file}: ${num(d.objects)} objects, ${bytes(d.bytes)}; `,
    `${num(d.reachable)} objects (${bytes(d.reachable_bytes)}) reachable from ${num(d.roots)} root sets`);
}

function heapTabs(f, active) {
  return el("nav", { class: "tabs" },
    el("a", { href: hashFor(`/heap/${f}/overview`), class: active === "overview" ? "on" : "" }, "Overview"),
    el("a", { href: hashFor(`/heap/${f}/top`), class: active === "top" ? "on" : "" }, "Top retainers"),
    el("a", { href: hashFor(`/heap/${f}/domtree`), class: active === "domtree" ? "on" : "", id: "domtree-tab" }, "Dominator tree"),
    el("a", { href: hashFor(`/heap/${f}/diff`), class: active === "diff" ? "on" : "", id: "diff-tab" }, "Compare"),
    el("a", { href: hashFor(`/heap/${f}/suspects`), class: active === "suspects" ? "on" : "", id: "suspects-tab" }, "Leak suspects"),
    el("a", { href: hashFor(`/heap/${f}/waste`), class: active === "waste" ? "on" : "", id: "waste-tab" }, "Waste"));
}

// beforePick lists the other open heap dumps to compare dump f with.
async function beforePick(f, base, p, extra) {
  const files = (await api("files", {})).files.filter(x => x.kind === "heap" && x.state === "ready" && String(x.id) !== String(f));
  return el("p", { class: "pivot", id: "before-pick" }, "Compare with an earlier dump: ",
    files.length ? files.map((x, k) => [k ? " · " : "", el("a", { href: hashFor(base, { ...extra, before: x.id }), class: String(x.id) === p.before ? "on" : "" }, x.name)])
      : "no other heap dump is open (drop one on this page).");
}

const views = {
  async files(gen) {
    setCrumbs(["files"]);
    const d = await api("files", {});
    const rows = d.files.map(f => {
      let link = f.name;
      if (f.state === "ready") link = el("a", { href: f.kind === "heap" ? hashFor(`/heap/${f.id}/overview`) : hashFor(`/profile/${f.id}/functions`) }, f.name);
      const what = f.state === "error" ? el("span", { class: "error" }, f.error)
        : f.state === "loading" ? "loading…"
        : f.kind === "heap" ? `heap dump, ${num(f.objects)} objects` + (f.index_built ? `, indexed in ${f.load_seconds.toFixed(1)} s` : ", index reused")
        : `recording, ${num(f.samples)} samples`;
      return el("tr", {}, el("td", {}, link), el("td", {}, what));
    });
    show(gen, "ready", el("h1", {}, "Files"),
      rows.length ? el("table", { id: "files" }, el("tbody", {}, rows)) : el("p", {}, "No file given: drop a heap dump or a raw recording on this page."),
      el("p", {}, el("a", { href: "#/crashes", id: "crashes-link" }, "Crash reports →"), " · ", el("a", { href: "#/live", id: "live-link" }, "Live Ruby processes →")),
      el("p", { class: "hint" }, "Drop a heap dump (ObjectSpace.dump_all or rbscope heap dump) or a raw recording (rbscope record --format raw) anywhere on this page to open it."));
    if (d.files.some(f => f.state === "loading")) setTimeout(() => { if (gen === generation) render(); }, 1000);
  },

  async live(gen, _, p) {
    setCrumbs(["files", "#/"], ["live processes"]);
    const d = await api("live", {});
    const out = el("div", { id: "live-out" });
    const act = async (what, pid, btn) => {
      btn.disabled = true;
      out.replaceChildren(el("p", { class: "hint" }, `${what} of pid ${pid}…`));
      try {
        if (what === "stack") {
          const s = await post("live/stack", { pid });
          out.replaceChildren(el("h2", {}, `pid ${s.pid}, Ruby ${s.ruby_version}`), ...s.threads.map(th => el("div", { class: "thread" },
            el("h3", {}, `${th.name || (th.main ? "main" : "thread")} (tid ${th.tid}, ${th.status}${th.gvl ? ", holds the GVL" : ""})`),
            el("ol", { class: "frames" }, th.frames.map(fr => el("li", {}, el("span", { class: "fn" }, fr.label), " ", fr.kind === "ruby" ? `${fr.path}:${fr.line}` : `<${fr.kind}>`))))));
        } else {
          const f = await post("live/" + what, what === "record" ? { pid, seconds: 10 } : { pid });
          location.hash = f.kind === "profile" || what === "record" ? `#/profile/${f.id}/functions` : `#/heap/${f.id}/overview`;
        }
      } catch (e) {
        out.replaceChildren(el("p", { class: "error" }, e.message));
      }
      btn.disabled = false;
    };
    const button = (label, what, pid) => { const b = el("button", { type: "button", class: "act-" + what }, label); b.addEventListener("click", () => act(what, pid, b)); return b; };
    show(gen, "ready", el("h1", {}, "Live Ruby processes"),
      el("p", { class: "hint" }, "The Ruby processes of this host that you may read. Stack pauses a process for a few milliseconds; heap dump for as long as it takes to copy its heap; record 10 s samples it at 100 Hz. Dumps and recordings open here and are kept in the cache directory."),
      d.processes.length ? table([
        { label: "PID", num: true, cell: r => r.pid },
        { label: "Ruby", cell: r => r.ruby || el("span", { title: r.ruby_error || "" }, "refused") },
        { label: "RSS", num: true, cell: r => bytes(r.rss) },
        { label: "CPU s", num: true, cell: r => r.cpu_seconds.toFixed(1) },
        { label: "Threads", num: true, cell: r => r.threads },
        { label: "Command", cls: "desc", cell: r => r.command },
        { label: "", cell: r => [button("stack", "stack", r.pid), " ", button("heap dump", "heap", r.pid), " ", button("record 10 s", "record", r.pid)] },
      ], d.processes, { id: "processes" }) : el("p", {}, "No Ruby process you may read."),
      out);
  },

  async crashes(gen) {
    setCrumbs(["files", "#/"], ["crashes"]);
    const d = await api("crashes", {});
    show(gen, "ready", el("h1", {}, "Crash reports"),
      d.crashes.length ? table([
        { label: "ID", cell: c => el("a", { href: hashFor("/crash", { id: c.id }) }, c.id) },
        { label: "Time", cell: c => c.time },
        { label: "PID", num: true, cell: c => c.pid },
        { label: "Signal", cell: c => c.signal },
        { label: "Executable", cell: c => c.exe },
        { label: "Top Ruby frame", cell: c => c.top_ruby_frame, cls: "fn" },
      ], d.crashes) : el("p", {}, "No crash kept."));
  },

  async crash(gen, _, p) {
    const d = await api("crash", { id: p.id });
    setCrumbs(["files", "#/"], ["crashes", "#/crashes"], [p.id]);
    show(gen, "ready", el("h1", {}, `Crash ${p.id}`), el("pre", { id: "report" }, d.text));
  },

  async "heap/overview"(gen, f, p) {
    const by = p.by || "class", sort = p.sort || "retained", offset = +p.offset || 0, limit = 100;
    const d = await api("heap/overview", { f, by, sort, offset, limit });
    setCrumbs(["files", "#/"], [d.file]);
    const base = `/heap/${f}/overview`;
    const cols = [];
    const drill = (r, text) => el("a", { href: hashFor(`/heap/${f}/objects`, { by, group: r.id }) }, text);
    if (by === "gem") cols.push({ label: "Gem", sort: "name", cell: r => drill(r, r.gem) });
    if (by === "generation") cols.push({ label: "GC generation", sort: "name", num: true, cell: r => drill(r, genName(r)) });
    if (by === "site") cols.push({ label: "Allocation site", sort: "name", cls: "fn", cell: r => drill(r, r.site) });
    if (by === "class" || by === "site") cols.push({ label: "Class", sort: by === "class" ? "name" : undefined, cell: r => by === "class" ? drill(r, r.class || "(none)") : r.class || "(none)" });
    if (by !== "gem" && by !== "generation") cols.push({ label: "Type", sort: by === "type" ? "name" : undefined, cell: r => by === "type" ? drill(r, r.type) : r.type });
    cols.push(
      { label: "Count", num: true, sort: "count", cell: r => num(r.count) },
      { label: "Shallow bytes", num: true, sort: "shallow", cell: r => num(r.shallow) },
      { label: "Retained bytes", num: true, sort: "retained", cell: r => num(r.retained) },
      { label: "Retained count", num: true, cell: r => num(r.retained_count) });
    show(gen, "ready", heapTabs(f, "overview"), dumpHead(d),
      el("p", { class: "pivot", id: "pivots" }, "Group by: ",
        (d.has_sites ? ["class", "type", "site", "gem", "generation"] : ["class", "type"]).map((p, k) =>
          [k ? " · " : "", el("a", { href: hashFor(base, { by: p, sort }), class: by === p ? "on" : "" }, p === "site" ? "allocation site" : p === "generation" ? "GC generation" : p)]),
        d.has_sites ? null : el("span", { class: "hint" }, " (by allocation site, gem and GC generation: dump after ObjectSpace.trace_object_allocations_start)")),
      by === "generation" ? el("p", { class: "hint" }, "The GC generation of an object is GC.count when it was allocated: objects of old generations that are still here were kept; sort by name for the order of allocation.") : null,
      table(cols, d.page.rows, { sorted: sort, sortHref: s => hashFor(base, { by, sort: s }) }),
      pager(d.page, limit, base, { by, sort }, "offset"));
  },

  async "heap/objects"(gen, f, p) {
    const by = p.by || "class", group = p.group || 0, offset = +p.offset || 0, limit = 100;
    const d = await api("heap/objects", { f, by, group, offset, limit });
    const g = d.group;
    const name = by === "generation" ? genName(g) : [g.gem, g.site, g.class, g.type].filter(x => x).join(" ");
    setCrumbs(["files", "#/"], [d.file, hashFor(`/heap/${f}/overview`, { by })], [name]);
    show(gen, "ready", heapTabs(f, ""), dumpHead(d),
      el("h2", {}, `${name}: ${num(g.count)} objects, ${num(g.shallow)} bytes, retaining ${num(g.retained)} bytes`),
      el("p", {}, el("a", { href: hashFor(`/heap/${f}/merged`, { by, group }), id: "merged-link" }, "Merged paths to the roots: what holds them →")),
      table(objectCols(f), d.page.rows), pager(d.page, limit, `/heap/${f}/objects`, { by, group }, "offset"));
  },

  async "heap/object"(gen, f, p) {
    const limit = 50;
    const params = { addr: p.addr, ro: p.ro || 0, rr: p.rr || 0, rd: p.rd || 0 };
    const d = await api("heap/object", { f, limit, ...params });
    const o = d.object;
    setCrumbs(["files", "#/"], [d.file, hashFor(`/heap/${f}/overview`)], [o.address]);
    const base = `/heap/${f}/object`;
    const facts = el("dl", { id: "facts" },
      el("dt", {}, "Type"), el("dd", {}, o.type),
      el("dt", {}, "Class"), el("dd", {}, o.class || "(none)"),
      el("dt", {}, "Description"), el("dd", { class: "desc" }, o.desc || "—"),
      el("dt", {}, "Self bytes"), el("dd", { id: "self" }, num(o.memsize)),
      el("dt", {}, "Retained"), el("dd", { id: "retained" }, o.reachable ? `${num(o.retained)} bytes in ${num(o.retained_count)} objects` : "not reachable from the roots (garbage)"),
      el("dt", {}, "Immediate dominator"), el("dd", {}, d.dominator ? objLink(f, d.dominator) : d.dominated_by_roots ? "the roots (no single object)" : "—"),
      el("dt", {}, "Root sets holding it"), el("dd", { id: "roots" }, d.roots.length ? d.roots.join(", ") : "none"),
      d.site ? el("dt", {}, "Allocated at") : null, d.site ? el("dd", {}, d.site) : null);
    const section = (title, key, pg, id) => [el("h2", {}, `${title} (${num(pg.total)})`),
      pg.total ? table(objectCols(f), pg.rows, { id }) : el("p", {}, "none"), pager(pg, limit, base, params, key)];
    // Instance variables by name: in rbscope's own dumps only (dump_all
    // writes none); a reference links to its object, an immediate is text.
    const ivars = d.instance_variables ? [el("h2", {}, `Instance variables (${num(d.instance_variables.length)})`),
      table([
        { label: "Name", cell: v => v.name, cls: "ivar-name" },
        { label: "Value", cell: v => v.object ? objLink(f, v.object) : v.address ? el("span", { class: "addr" }, `${v.address} (not in the dump)`) : v.value, cls: "ivar-value" },
        { label: "Type", cell: v => v.object ? v.object.type : "" },
        { label: "Class", cell: v => v.object ? v.object.class || "(none)" : "" },
        { label: "Description", cell: v => v.object ? v.object.desc : "", cls: "desc" },
        { label: "Retained", num: true, cell: v => v.object ? (v.object.reachable === false ? "unreachable" : num(v.object.retained)) : "" },
      ], d.instance_variables, { id: "ivars" })]
      : d.instance_variables_error ? el("p", { id: "ivars-error" }, `Instance variables: ${d.instance_variables_error}`) : null;
    show(gen, "ready", heapTabs(f, ""), el("h1", {}, `${o.type} ${o.class || ""} ${o.address}`),
      el("p", {}, el("a", { href: hashFor(`/heap/${f}/paths`, { addr: o.address }), id: "paths-link" }, "Paths to the roots →")),
      facts,
      ivars,
      section("References", "ro", d.references, "references"),
      section("Referrers", "rr", d.referrers, "referrers"),
      section("Immediately dominated", "rd", d.dominated, "dominated"));
  },

  async "heap/paths"(gen, f, p) {
    const n = p.n || 5, ignore = p.ignore || "";
    const d = await api("heap/paths", { f, addr: p.addr, n, ignore });
    const ignoring = a => hashFor(`/heap/${f}/paths`, { addr: p.addr, n, ignore: [...d.ignored, a].join(",") });
    const o = d.object;
    setCrumbs(["files", "#/"], [d.file, hashFor(`/heap/${f}/overview`)], [o.address, hashFor(`/heap/${f}/object`, { addr: o.address })], ["paths"]);
    const paths = d.paths.map((pa, k) => el("div", { class: "path" },
      el("h2", {}, `Path ${k + 1}: ${pa.hops.length} objects from root ${pa.root}`),
      el("ol", {}, pa.hops.map(h => el("li", { class: h.dominator ? "dom" : "" },
        objLink(f, h), " ", h.type, " ", h.class || "(none)", " ", el("span", { class: "desc" }, h.desc),
        h.conservative ? el("span", { class: "tag" }, "conservative") : null,
        h.dominator ? el("span", { class: "tag dom" }, "dominator") : null,
        h.address !== d.object.address ? [" ", el("a", { href: ignoring(h.address), class: "ignore" }, "ignore this holder")] : null)))));
    show(gen, "ready", heapTabs(f, ""), el("h1", {}, `Who holds ${o.type} ${o.class || ""} ${o.address}`),
      el("p", {}, `Held by ${num(d.holders)} object(s). `, el("span", { class: "tag dom" }, "dominator"), " marks the objects every path passes through: freeing one frees this object."),
      d.ignored.length ? el("p", { id: "ignored" }, `Paths through none of ${d.ignored.join(", ")} (ignored) `,
        el("a", { href: hashFor(`/heap/${f}/paths`, { addr: p.addr, n }) }, "ignore none")) : null,
      d.paths.length ? paths : el("p", {}, d.ignored.length ? "No path avoids the ignored objects: they are what holds it."
        : "Not reachable from the roots (garbage not yet collected when the dump was taken)."),
      el("p", {}, el("a", { href: hashFor(`/heap/${f}/paths`, { addr: o.address, n: Number(n) * 2, ignore }) }, "more paths")));
  },

  async "heap/top"(gen, f, p) {
    const n = p.n || 50;
    const d = await api("heap/top", { f, n });
    setCrumbs(["files", "#/"], [d.file, hashFor(`/heap/${f}/overview`)], ["top retainers"]);
    const cols = [...objectCols(f).slice(0, 5),
      { label: "Retained", num: true, cell: r => num(r.retained) },
      { label: "Ret. count", num: true, cell: r => num(r.count) },
      { label: "Dominator", cell: r => r.dominator === "root" ? "root" : objLink(f, { address: r.dominator }) }];
    show(gen, "ready", heapTabs(f, "top"),
      el("p", { class: "summary" }, `${num(d.objects)} objects, ${bytes(d.bytes)}; ${num(d.reachable)} reachable (${bytes(d.reachable_bytes)})`),
      table(cols, d.retainers), el("p", {}, el("a", { href: hashFor(`/heap/${f}/top`, { n: Number(n) * 2 }) }, "more")));
  },

  async "heap/merged"(gen, f, p) {
    const by = p.by || "class", group = p.group || 0;
    const d = await api("heap/merged", { f, by, group });
    const g = d.group;
    const name = by === "generation" ? genName(g) : [g.gem, g.site, g.class, g.type].filter(x => x).join(" ");
    setCrumbs(["files", "#/"], [d.file, hashFor(`/heap/${f}/overview`, { by })], [name, hashFor(`/heap/${f}/objects`, { by, group })], ["merged paths"]);
    const node = n => el("li", {},
      el("span", { class: "count" }, num(n.targets)), " ",
      n.root ? `root ${n.root}` : [objLink(f, n.object), " ", n.object.type, " ", n.object.class || "(none)", " ", el("span", { class: "desc" }, n.object.desc)],
      n.children.length ? el("ul", {}, n.children.map(node)) : null);
    show(gen, "ready", heapTabs(f, ""), dumpHead(d),
      el("h2", {}, `What holds ${name}`),
      el("p", { class: "hint" }, `The shortest paths from the roots to ${num(d.followed)} of its ${num(g.count)} objects (the largest first), merged: each line is an object on the way and how many of them pass through it. ${d.unreached ? num(d.unreached) + " no root reaches. " : ""}Branches holding fewer than 1 in 200 are left out.`),
      el("ul", { id: "merged", class: "tree" }, d.tree.map(node)));
  },

  async "heap/domtree"(gen, f, p) {
    const by = p.by || "object", offset = +p.offset || 0, limit = 100;
    const params = { addr: p.addr, by, class: p.class, type: p.type };
    const d = await api("heap/domtree", { f, offset, limit, ...Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined)) });
    const base = `/heap/${f}/domtree`;
    setCrumbs(["files", "#/"], [d.file, hashFor(`/heap/${f}/overview`)], ["dominator tree"]);
    const at = o => hashFor(base, { addr: o.address, by });
    const trail = el("p", { class: "path", id: "dom-trail" }, el("a", { href: hashFor(base, { by }) }, "roots"),
      d.ancestors.map(a => [" › ", el("a", { href: at(a) }, `${a.type} ${a.class || ""} ${a.address}`)]),
      d.node ? [" › ", el("strong", {}, `${d.node.type} ${d.node.class || ""} ${d.node.address}`)] : null);
    const head = d.node ? el("p", { class: "summary" }, `${d.node.type} ${d.node.class || ""} ${d.node.desc}: retains ${num(d.node.retained)} bytes in ${num(d.node.retained_count)} objects. `, el("a", { href: hashFor(`/heap/${f}/object`, { addr: d.node.address }) }, "object page →"))
      : el("p", { class: "summary" }, `The objects no single other object keeps alive: each retains what only it holds. ${num(d.reachable)} objects (${bytes(d.reachable_bytes)}) reachable.`);
    const pivot = el("p", { class: "pivot" }, "Children: ",
      el("a", { href: hashFor(base, { addr: p.addr, by: "object" }), class: by === "object" ? "on" : "" }, "each"), " · ",
      el("a", { href: hashFor(base, { addr: p.addr, by: "class" }), class: by === "class" ? "on" : "" }, "by class"),
      p.class !== undefined ? [" · only ", `${p.class || "(none)"} ${p.type}`] : null);
    let body;
    if (by === "class") {
      body = [table([
        { label: "Class", cell: g => el("a", { href: hashFor(base, { addr: p.addr, by: "object", class: g.class, type: g.type }) }, g.class || "(none)") },
        { label: "Type", cell: g => g.type },
        { label: "Count", num: true, cell: g => num(g.count) },
        { label: "Shallow bytes", num: true, cell: g => num(g.shallow) },
        { label: "Retained bytes", num: true, cell: g => num(g.retained) },
      ], d.groups.rows, { id: "dom-groups" }), pager(d.groups, limit, base, params, "offset")];
    } else {
      body = [table([
        { label: "Address", cell: o => o.children ? el("a", { href: at(o), class: "addr" }, o.address) : o.address },
        { label: "Type", cell: o => o.type },
        { label: "Class", cell: o => o.class || "(none)" },
        { label: "Description", cls: "desc", cell: o => o.desc },
        { label: "Retained", num: true, cell: o => num(o.retained) },
        { label: "Ret. count", num: true, cell: o => num(o.retained_count) },
        { label: "Children", num: true, cell: o => num(o.children) },
      ], d.objects.rows, { id: "dom-children" }), pager(d.objects, limit, base, params, "offset")];
    }
    show(gen, "ready", heapTabs(f, "domtree"), trail, head, pivot, body);
  },

  async "heap/diff"(gen, f, p) {
    const by = p.by || "class", top = p.top || 100;
    const base = `/heap/${f}/diff`;
    const pick = await beforePick(f, base, p, { by });
    if (p.before === undefined) {
      setCrumbs(["files", "#/"], ["compare"]);
      show(gen, "ready", heapTabs(f, "diff"), el("h1", {}, "What is new in this dump"), pick);
      return;
    }
    const d = await api("heap/diff", { f, before: p.before, by, top, ...(p.later !== undefined ? { later: p.later } : {}) });
    setCrumbs(["files", "#/"], [d.after.file, hashFor(`/heap/${f}/overview`)], ["new since " + d.before.file]);
    const others = (await api("files", {})).files.filter(x => x.kind === "heap" && x.state === "ready" && String(x.id) !== String(f) && String(x.id) !== p.before);
    const laterPick = el("p", { class: "pivot", id: "later-pick" }, "And a later dump, to keep only what it still holds (heapy's three dumps): ",
      others.map((x, k) => [k ? " · " : "", el("a", { href: hashFor(base, { before: p.before, by, later: x.id }), class: String(x.id) === p.later ? "on" : "" }, x.name)]),
      p.later !== undefined ? [" · ", el("a", { href: hashFor(base, { before: p.before, by }) }, "none")] : null);
    const cols = [];
    if (by === "site") cols.push({ label: "Allocation site", cell: r => r.site || "(unknown)", cls: "fn" });
    cols.push({ label: "Class", cell: r => r.class || "(none)" }, { label: "Type", cell: r => r.type },
      { label: "New objects", num: true, cell: r => num(r.count) }, { label: "Bytes", num: true, cell: r => num(r.bytes) });
    show(gen, "ready", heapTabs(f, "diff"), pick, others.length ? laterPick : null,
      el("p", { class: "summary", id: "diff-summary" }, `${d.after.file}: ${num(d.new_objects)} objects (${bytes(d.new_bytes)}) that ${d.before.file} lacks; `,
        `${num(d.gone_objects)} objects (${bytes(d.gone_bytes)}) of it are gone`,
        d.later ? `; ${d.later.file} still holds ${num(d.kept_objects)} of the new ones (${bytes(d.kept_bytes)}), which the rows list` : ""),
      el("p", { class: "pivot" }, "Group by: ",
        el("a", { href: hashFor(base, { before: p.before, later: p.later, by: "class" }), class: by === "class" ? "on" : "" }, "class"), " · ",
        el("a", { href: hashFor(base, { before: p.before, later: p.later, by: "site" }), class: by === "site" ? "on" : "" }, "allocation site")),
      table(cols, d.rows, { id: "diff" }),
      d.more_rows ? el("p", {}, el("a", { href: hashFor(base, { before: p.before, by, later: p.later, top: Math.min(Number(top) * 2, 1000) }) }, `${num(d.more_rows)} more`)) : null);
  },

  async "heap/suspects"(gen, f, p) {
    const top = p.top || 10;
    const base = `/heap/${f}/suspects`;
    const pick = await beforePick(f, base, p, {});
    if (p.before === undefined) {
      setCrumbs(["files", "#/"], ["leak suspects"]);
      show(gen, "ready", heapTabs(f, "suspects"), el("h1", {}, "Where this dump grew"), pick);
      return;
    }
    const d = await api("heap/suspects", { f, before: p.before, top, ...(p.later !== undefined ? { later: p.later } : {}) });
    setCrumbs(["files", "#/"], [d.after.file, hashFor(`/heap/${f}/overview`)], ["leak suspects since " + d.before.file]);
    const others = (await api("files", {})).files.filter(x => x.kind === "heap" && x.state === "ready" && String(x.id) !== String(f) && String(x.id) !== p.before);
    const laterPick = el("p", { class: "pivot", id: "later-pick" }, "And a later dump, to charge only what it still holds: ",
      others.map((x, k) => [k ? " · " : "", el("a", { href: hashFor(base, { before: p.before, later: x.id }), class: String(x.id) === p.later ? "on" : "" }, x.name)]),
      p.later !== undefined ? [" · ", el("a", { href: hashFor(base, { before: p.before }) }, "none")] : null);
    const blocks = d.suspects.map((s, k) => {
      const h = s.holder;
      const title = h ? [`${k + 1}. `, objLink(f, h), ` ${h.type} ${h.class || ""} ${h.desc} keeps `]
        : [`${k + 1}. The root sets directly keep `];
      const rows = s.sites && s.sites.length ? s.sites : s.classes;
      const cols = [];
      if (s.sites && s.sites.length) cols.push({ label: "Allocation site", cell: r => r.site || "(unknown)", cls: "fn" });
      cols.push({ label: "Class", cell: r => r.class || "(none)" }, { label: "Type", cell: r => r.type },
        { label: "New objects", num: true, cell: r => num(r.count) }, { label: "Bytes", num: true, cell: r => num(r.bytes) });
      return el("div", { class: "suspect" },
        el("h2", {}, ...title, `${num(s.new_objects)} new objects (${bytes(s.new_bytes)})`, h ? `, retains ${bytes(s.retained)}` : ""),
        s.path ? el("ol", { class: "path" }, el("li", {}, "root " + s.path.root),
          s.path.hops.map(x => el("li", {}, objLink(f, x), " ", x.type, " ", x.class || "(none)", " ", el("span", { class: "desc" }, x.desc),
            x.conservative ? el("span", { class: "tag" }, "conservative") : null))) : null,
        table(cols, rows, { id: "suspect-" + k }));
    });
    show(gen, "ready", heapTabs(f, "suspects"), pick, others.length ? laterPick : null,
      el("p", { class: "summary", id: "suspects-summary" }, d.later
        ? `${d.later.file} still holds ${num(d.kept_objects)} (${bytes(d.kept_bytes)}) of the ${num(d.new_objects)} objects that ${d.after.file} has and ${d.before.file} lacks; each is charged to the nearest object above it that is not one of them.`
        : `${d.after.file}: ${num(d.new_objects)} objects (${bytes(d.new_bytes)}) that ${d.before.file} lacks, charged to the nearest object both dumps hold that keeps them.`),
      blocks.length ? blocks : el("p", {}, "Nothing new is kept."),
      d.suspects.length >= top ? el("p", {}, el("a", { href: hashFor(base, { before: p.before, later: p.later, top: Math.min(Number(top) * 2, 100) }) }, "more")) : null);
  },

  async "heap/waste"(gen, f, p) {
    const n = p.n || 50;
    const d = await api("heap/waste", { f, n });
    setCrumbs(["files", "#/"], [d.file, hashFor(`/heap/${f}/overview`)], ["waste"]);
    const emptyCols = by => [...(by === "site" ? [{ label: "Allocation site", cell: r => r.site || "(unknown)", cls: "fn" }] : []),
      { label: "Class", cell: r => r.class || "(none)" }, { label: "Type", cell: r => r.type },
      { label: "Empty", num: true, cell: r => num(r.count) }, { label: "Bytes", num: true, cell: r => num(r.bytes) }];
    const overCols = by => [...(by === "site" ? [{ label: "Allocation site", cell: r => r.site || "(unknown)", cls: "fn" }] : []),
      { label: "Class", cell: r => r.class || "(none)" }, { label: "Type", cell: r => r.type },
      { label: "Oversized", num: true, cell: r => num(r.count) }, { label: "Spare bytes", num: true, cell: r => num(r.bytes) }];
    show(gen, "ready", heapTabs(f, "waste"), dumpHead(d),
      el("h2", {}, `Duplicate Strings: ${bytes(d.strings_wasted)} wasted`),
      el("p", { class: "hint" }, "Values held by several Strings, each in its own memory: keeping one (freeze it, or String#-@) saves the rest. A long value is known by its first bytes and its size (marked …)."),
      d.strings.length ? table([
        { label: "Value", cls: "desc", cell: r => JSON.stringify(r.value) + (r.cut ? "…" : "") },
        { label: "Strings", num: true, cell: r => num(r.count) },
        { label: "Bytes", num: true, cell: r => num(r.bytes) },
        { label: "Wasted", num: true, cell: r => num(r.wasted) },
        { label: "One of them", cell: r => objLink(f, r.example) },
      ], d.strings, { id: "dup-strings" }) : el("p", {}, "No value is held twice (or the dump has no String values: --redact-strings)."),
      d.strings.length >= n ? el("p", {}, el("a", { href: hashFor(`/heap/${f}/waste`, { n: Math.min(Number(n) * 2, 1000) }) }, "more")) : null,
      el("h2", {}, "Empty Arrays and Hashes"),
      d.empty.length ? table(emptyCols("class"), d.empty, { id: "empty" }) : el("p", {}, "None."),
      d.empty_sites && d.empty_sites.length ? [el("h2", {}, "… by allocation site"), table(emptyCols("site"), d.empty_sites.slice(0, 50), { id: "empty-sites" })] : null,
      el("h2", {}, `Oversized Arrays and Hashes: ${bytes(d.oversized_spare)} spare`),
      el("p", { class: "hint" }, "Collections whose memory is mostly room their elements do not use: an Array keeps its buffer at its largest after reject!, select!, keep_if, delete_if or slice!; on Ruby 3.3 and earlier a Hash keeps its table after most of its keys were deleted. A copy (dup) is right-sized. Spare: the bytes beyond what the elements need."),
      d.oversized.length ? [
        table([
          { label: "Object", cell: r => objLink(f, r.object) },
          { label: "Class", cell: r => r.object.class || "(none)" },
          { label: "Type", cell: r => r.object.type },
          { label: "Length", num: true, cell: r => num(r.length) },
          { label: "Bytes", num: true, cell: r => num(r.bytes) },
          { label: "Spare", num: true, cell: r => num(r.spare) },
        ], d.oversized, { id: "oversized" }),
        d.oversized.length >= n ? el("p", {}, el("a", { href: hashFor(`/heap/${f}/waste`, { n: Math.min(Number(n) * 2, 1000) }) }, "more")) : null,
        el("h2", {}, "… by class"), table(overCols("class"), d.oversized_classes.slice(0, 50), { id: "oversized-classes" }),
        d.oversized_sites && d.oversized_sites.length ? [el("h2", {}, "… by allocation site"), table(overCols("site"), d.oversized_sites.slice(0, 50), { id: "oversized-sites" })] : null,
      ] : el("p", {}, "None."));
  },

  async "profile/sandwich"(gen, f, p) {
    const t = p.t || "", before = p.before;
    const d = await api("profile/sandwich", { f, fn: p.fn, t, ...(before !== undefined ? { before } : {}) });
    setCrumbs(["files", "#/"], [d.file, hashFor(`/profile/${f}/functions`, { t })], [d.function]);
    const calls = (id, rows) => rows.length ? table([
      { label: "Function", cls: "fn", cell: r => r.function === "(root)" ? r.function : el("a", { href: hashFor(`/profile/${f}/sandwich`, { fn: r.function, t, before }) }, r.function) },
      { label: "Samples", num: true, cell: r => num(r.samples) },
      { label: "% of its total", num: true, cell: r => pct(r.pct) },
      ...(d.before ? [{ label: "Samples before", num: true, cell: r => num(r.before_samples || 0) }, ...diffCols(true)] : []),
    ], rows, { id }) : el("p", {}, "none");
    show(gen, "ready", profileTabs(f, "", t), profileHead(d), transformsBar(f, "sandwich", p), await againstPick(f, "sandwich", p), againstHead(d),
      el("h1", {}, d.function), transformLinks(f, "sandwich", p, d.function),
      el("p", { class: "summary", id: "sandwich-summary" }, `In ${num(d.total)} samples (${pct(100 * d.total / d.samples)}), ${num(d.self)} of them in its own code.`,
        d.before ? [` Before: in ${num(d.before_total || 0)} (${pct(d.total_diff.before_pct)}), ${num(d.before_self || 0)} in its own code; total `, changeCell(d.total_diff), ", self ", changeCell(d.self_diff), "."] : null),
      el("h2", {}, "Called by"), calls("callers", d.callers),
      el("h2", {}, "Calls"), calls("callees", d.callees));
  },

  async "profile/diff"(gen, f, p) {
    const sort = p.sort || "self", offset = +p.offset || 0, limit = 100;
    const base = `/profile/${f}/diff`;
    const files = (await api("files", {})).files.filter(x => x.kind === "profile" && x.state === "ready" && String(x.id) !== String(f));
    const pick = el("p", { class: "pivot", id: "before-pick" }, "Compare with another recording: ",
      files.length ? files.map((x, k) => [k ? " · " : "", el("a", { href: hashFor(base, { before: x.id, sort }), class: String(x.id) === p.before ? "on" : "" }, x.name)])
        : "no other recording is open (drop one on this page).");
    if (p.before === undefined) {
      setCrumbs(["files", "#/"], ["compare"]);
      show(gen, "ready", profileTabs(f, "diff"), el("h1", {}, "What changed against another recording"), pick);
      return;
    }
    const d = await api("profile/diff", { f, before: p.before, sort, offset, limit });
    setCrumbs(["files", "#/"], [d.after.file, hashFor(`/profile/${f}/functions`)], ["against " + d.before.file]);
    const change = v => el("span", { class: v > 0 ? "up" : v < 0 ? "down" : "" }, (v > 0 ? "+" : "") + v.toFixed(2));
    show(gen, "ready", profileTabs(f, "diff"), pick,
      el("p", { class: "summary" }, `${d.before.file}: ${num(d.before.samples)} samples; ${d.after.file}: ${num(d.after.samples)} samples. Shares are of each recording's samples; changes in points.`),
      el("p", { class: "pivot", id: "diff-views" }, "The same comparison in the ",
        el("a", { href: hashFor(`/profile/${f}/tree`, { before: p.before }) }, "call tree"), " · ",
        el("a", { href: hashFor(`/profile/${f}/flame`, { before: p.before }) }, "flame graph"), "; a function opens its sandwich against it."),
      table([
        { label: "Self before %", num: true, cell: r => pct(r.before_self_pct) },
        { label: "Self after %", num: true, cell: r => pct(r.after_self_pct) },
        { label: "Self change", num: true, sort: "self", cell: r => change(r.self_change) },
        { label: "Total change", num: true, sort: "total", cell: r => change(r.total_change) },
        { label: "Function", cls: "fn", cell: r => el("a", { href: hashFor(`/profile/${f}/sandwich`, { fn: r.function, before: p.before }) }, r.function) },
      ], d.page.rows, { id: "diff", sorted: sort, sortHref: s => hashFor(base, { before: p.before, sort: s }) }),
      pager(d.page, limit, base, { before: p.before, sort }, "offset"));
  },

  async "profile/functions"(gen, f, p) {
    const sort = p.sort || "self", offset = +p.offset || 0, limit = 100, search = p.search || "", t = p.t || "";
    const d = await api("profile/functions", { f, sort, offset, limit, search, t });
    setCrumbs(["files", "#/"], [d.file]);
    const base = `/profile/${f}/functions`;
    const box = el("input", { type: "search", id: "search", placeholder: "function name contains…", value: search });
    const form = el("form", { id: "search-form", class: "pivot" }, box, " ", el("button", { type: "submit" }, "search"),
      search ? [" ", el("span", { id: "search-summary" }, `${num(d.page.total)} functions; in ${num(d.matched_samples)} samples (${pct(100 * d.matched_samples / Math.max(d.samples, 1))})`), " ",
        el("a", { href: hashFor(base, { sort, t }) }, "clear")] : null);
    form.addEventListener("submit", e => { e.preventDefault(); location.hash = hashFor(base, { sort, search: box.value, t }); });
    show(gen, "ready", profileTabs(f, "functions", t), profileHead(d), transformsBar(f, "functions", p), await cutsBar(f, "functions", p), form,
      table([
        { label: "Self %", num: true, sort: "self", cell: r => pct(r.self_pct) },
        { label: "Total %", num: true, sort: "total", cell: r => pct(r.total_pct) },
        { label: "Self", num: true, cell: r => num(r.self) },
        { label: "Total", num: true, cell: r => num(r.total) },
        { label: "Function", sort: "name", cell: r => el("a", { href: hashFor(`/profile/${f}/sandwich`, { fn: r.function, t }) }, r.function), cls: "fn" },
        { label: "", cell: r => transformLinks(f, "functions", p, r.function) },
      ], d.page.rows, { sorted: sort, sortHref: s => hashFor(base, { sort: s, search, t }) }),
      pager(d.page, limit, base, { sort, search, t }, "offset"));
  },

  async "profile/flame"(gen, f, p) {
    const t = p.t || "";
    // Start from the frame chosen last time ("start here"), where this
    // recording has it and the view asks for nothing else.
    const chosen = localStorage.getItem(flameStartKey);
    if (chosen && !t && p.all !== "1") {
      try {
        await api("profile/sandwich", { f, fn: chosen });
        location.replace(hashFor(`/profile/${f}/flame`, { ...p, t: "focus:" + chosen }));
        return;
      } catch (e) { /* not in this recording: the whole graph */ }
    }
    const d = await api("profile/functions", { f, limit: 1, t });
    setCrumbs(["files", "#/"], [d.file]);
    const icicle = p.icicle === "1", before = p.before;
    const src = "/api/profile/flame.svg?" + new URLSearchParams({ f, ...(icicle ? { icicle: 1 } : {}), ...(t ? { t } : {}), ...(before !== undefined ? { before } : {}) }).toString();
    const frame = el("iframe", { id: "flame", src, title: icicle ? "icicle graph" : "flame graph" });
    const pivot = el("p", { class: "pivot" }, "Draw as: ",
      el("a", { href: hashFor(`/profile/${f}/flame`, { t, before }), class: icicle ? "" : "on" }, "flame graph (roots at the bottom)"), " · ",
      el("a", { href: hashFor(`/profile/${f}/flame`, { icicle: 1, t, before }), class: icicle ? "on" : "", id: "icicle-link" }, "icicle (roots at the top)"));
    const against = await againstPick(f, "flame", p);
    const unfocused = hashFor(`/profile/${f}/flame`, { ...p, all: 1, t: transforms(p).filter(x => x !== "focus:" + chosen).join("\n") || undefined });
    const remembered = chosen && transforms(p).includes("focus:" + chosen) ? el("p", { class: "pivot", id: "flame-remembered" },
      `Starting from ${chosen}, as chosen before. `,
      el("a", { href: unfocused, id: "flame-root" }, "start from the roots"), " · ",
      el("a", { href: unfocused, id: "flame-forget" }, "forget the choice")) : null;
    const pick = el("p", { class: "pivot", id: "flame-pick" },
      "The graph opens at the request's own frames (the endpoints' actions) or where the stacks first part; scroll for the rest. Click a frame to zoom into it, and to start from it here and next time.");
    onFlamePick = e => {
      if (gen !== generation || e.source !== frame.contentWindow) return;
      const { fn, title } = e.data;
      const start = el("a", { href: hashFor(`/profile/${f}/flame`, { ...p, t: [...transforms(p), "focus:" + fn].join("\n") }), id: "flame-start",
        title: "keep only the samples through it, from it up, in every view; the flame graph of the next recording starts from it too" }, "start here, and next time");
      start.addEventListener("click", () => localStorage.setItem(flameStartKey, fn));
      pick.replaceChildren(el("span", { class: "fn", id: "flame-picked" }, title), " ", start, " ", transformLinks(f, "flame", p, fn));
    };
    show(gen, "loading", profileTabs(f, "flame", t), profileHead(d), transformsBar(f, "flame", p), await cutsBar(f, "flame", p), remembered, pivot, against, pick, frame);
    const forget = document.getElementById("flame-forget");
    if (forget) forget.addEventListener("click", () => localStorage.removeItem(flameStartKey));
    frame.addEventListener("load", () => { if (gen === generation) view.dataset.state = "ready"; });
  },

  async "profile/timeline"(gen, f, p) {
    const t = p.t || "", n = 200, before = p.before, zoom = p.zoom === "1" ? "1" : undefined;
    const d = await api("profile/timeline", { f, t, stretches: n, ...(zoom ? { zoom } : {}), ...(before !== undefined ? { before } : {}) });
    setCrumbs(["files", "#/"], [d.file, hashFor(`/profile/${f}/functions`, { t })], ["timeline"]);
    const lo = d.from_seconds, step = d.span_seconds / n;
    const most = Math.max(1, ...d.threads.flatMap(th => th.run.map((r, k) => r + th.gc[k] + th.gvl[k])));
    const rows = d.threads.map(th => el("div", { class: "track" },
      el("div", { class: "track-name" }, `${th.thread || "thread"} (tid ${th.tid})`),
      el("div", { class: "track-cells" }, th.run.map((r, k) => {
        const all = r + th.gc[k] + th.gvl[k];
        const what = !all ? "idle" : th.gc[k] >= r && th.gc[k] >= th.gvl[k] ? "gc" : th.gvl[k] > r ? "gvl" : "run";
        // Against a recording before, a stretch stands for the function
        // of its samples that did the most of the change, on its colour.
        const fn = th.fn ? th.fn[k] : "", c = fn ? d.changes[fn] : null;
        const a0 = lo + k * step, a1 = lo + (k + 1) * step;
        const a = el("a", { class: "cell " + what, draggable: "false", href: hashFor(`/profile/${f}/timeline`, { before, zoom, t: [...transforms(p), `time:${a0.toFixed(3)}-${a1.toFixed(3)}`].join("\n") }),
          title: `${a0.toFixed(2)}–${a1.toFixed(2)} s: ${r} running, ${th.gc[k]} in GC, ${th.gvl[k]} waiting for the GVL` +
            (c ? `; changed the most: ${fn}, in ${pct(c.after_pct)} of the samples, ${pct(c.before_pct)} before, ${(c.change > 0 ? "+" : "") + c.change.toFixed(2)} points` : "") });
        if (c) {
          a.dataset.fn = fn;
          a.style.background = c.color;
        } else {
          a.style.opacity = all ? String(0.25 + 0.75 * all / most) : "1";
        }
        return a;
      }))));
    const from = el("input", { id: "from", type: "number", step: "any", min: "0", placeholder: "from s" });
    const to = el("input", { id: "to", type: "number", step: "any", min: "0", placeholder: "to s" });
    const form = el("form", { class: "pivot", id: "range-form" }, "Keep the samples from ", from, " to ", to, " seconds in every view ", el("button", { type: "submit" }, "apply"));
    form.addEventListener("submit", e => {
      e.preventDefault();
      location.hash = hashFor(`/profile/${f}/timeline`, { before, zoom, t: [...transforms(p), `time:${Number(from.value) || 0}-${to.value}`].join("\n") });
    });
    const timeline = el("div", { id: "timeline" }, rows);
    const range = timeRange(p);
    // The time kept, drawn over the whole recording (zoomed, it is all
    // of the timeline).
    if (range && !zoom && rows.length) {
      const end = range.to === null ? lo + d.span_seconds : range.to;
      timeline.append(selection("selection-kept", (range.from - lo) / d.span_seconds, (end - lo) / d.span_seconds, range.from, end));
    }
    const cellsOf = () => timeline.querySelector(".track-cells");
    if (rows.length) {
      dragSelect(timeline, cellsOf, x => lo + x * d.span_seconds, (a, b) => {
        location.hash = hashFor(`/profile/${f}/timeline`, { before, zoom, t: withRange(p, a, b) });
      });
    }
    const zoomBar = range ? el("p", { class: "pivot", id: "zoom-bar" }, zoom
      ? [`The timeline shows ${secs(lo, d.span_seconds)}–${secs(lo + d.span_seconds, d.span_seconds)} s. `, el("a", { href: hashFor(`/profile/${f}/timeline`, { before, t }), id: "zoom-out" }, "show the whole recording")]
      : [el("a", { href: hashFor(`/profile/${f}/timeline`, { before, t, zoom: 1 }), id: "zoom-in" }, "zoom into the selection")]) : null;
    show(gen, "ready", profileTabs(f, "timeline", t), profileHead(d), transformsBar(f, "timeline", p), await cutsBar(f, "timeline", p), await againstPick(f, "timeline", p), againstHead(d),
      el("p", { class: "hint" }, d.before
        ? `A track per thread over ${d.span_seconds.toFixed(1)} s, in ${n} stretches: each on the colour of the change of the share of the samples of the function in it that changed the most (by the change times its samples there).`
        : `A track per thread over ${d.span_seconds.toFixed(1)} s, in ${n} stretches: blue while it ran, orange in GC, grey waiting for the GVL, darker for more samples.`,
        " Drag across the tracks to keep that time in every view (Esc clears it); a stretch clicked keeps its own."),
      zoomBar, timeline, form);
  },

  async "profile/stack"(gen, f, p) {
    const t = p.t || "", lines = p.lines === "1", before = p.before;
    const d = await api("profile/functions", { f, limit: 1, t });
    setCrumbs(["files", "#/"], [d.file, hashFor(`/profile/${f}/functions`, { t })], ["stack chart"]);
    const src = "/api/profile/stackchart.svg?" + new URLSearchParams({ f, ...(lines ? { lines: 1 } : {}), ...(t ? { t } : {}), ...(before !== undefined ? { before } : {}) }).toString();
    const frame = el("iframe", { id: "stackchart", src, title: "stack chart" });
    const pivot = el("p", { class: "pivot" }, "Boxes: ",
      el("a", { href: hashFor(`/profile/${f}/stack`, { t, before }), class: lines ? "" : "on" }, "a function each"), " · ",
      el("a", { href: hashFor(`/profile/${f}/stack`, { t, before, lines: 1 }), class: lines ? "on" : "", id: "lines-link" }, "a line each"));
    const pick = el("p", { class: "pivot", id: "chart-pick" }, "Click a box to focus on its function or narrow every view to its time; drag across the chart to keep that time in every view and zoom into it (Esc clears it).");
    onChartPick = e => {
      if (gen !== generation || e.source !== frame.contentWindow) return;
      if (e.data.escape) { clearRange(); return; }
      if (e.data.range) {
        location.hash = hashFor(`/profile/${f}/stack`, { ...p, t: withRange(p, e.data.from, e.data.to) });
        return;
      }
      const { fn, title, from, to } = e.data;
      const narrow = hashFor(`/profile/${f}/stack`, { ...p, t: [...transforms(p), `time:${from.toFixed(6)}-${to.toFixed(6)}`].join("\n") });
      pick.replaceChildren(el("span", { class: "fn", id: "chart-picked" }, title), " ", transformLinks(f, "stack", p, fn), " ",
        el("a", { href: narrow, id: "chart-narrow", title: "keep the samples of its time in every view" }, "narrow to its time"));
    };
    show(gen, "loading", profileTabs(f, "stack", t), profileHead(d), transformsBar(f, "stack", p), await cutsBar(f, "stack", p), pivot, await againstPick(f, "stack", p),
      el("p", { class: "hint" }, "A track per thread, time left to right: each box a frame, as wide as the run of samples in it, its callees below it. Hover a box for its file, lines and time" +
        (before !== undefined ? "; against the recording before, each box is on the colour of the change of its function's share of the samples, which its title gives." : ".")),
      pick, frame);
    frame.addEventListener("load", () => { if (gen === generation) view.dataset.state = "ready"; });
  },

  async "profile/tree"(gen, f, p) {
    const node = p.node || 0, t = p.t || "", before = p.before;
    const d = await api("profile/tree", { f, node, t, ...(before !== undefined ? { before } : {}) });
    setCrumbs(["files", "#/"], [d.file]);
    const link = r => el("a", { href: hashFor(`/profile/${f}/tree`, { node: r.node, t, before }) }, r.name);
    const cols = [
      { label: "Total %", num: true, cell: r => pct(r.total_pct) },
      { label: "Total", num: true, cell: r => num(r.total) },
      { label: "Self", num: true, cell: r => num(r.self) },
      { label: "Called", cell: r => r.children ? link(r) : r.name, cls: "fn" },
    ];
    if (d.before) cols.splice(1, 0, ...diffCols(false));
    show(gen, "ready", profileTabs(f, "tree", t), profileHead(d), transformsBar(f, "tree", p), await cutsBar(f, "tree", p), await againstPick(f, "tree", p), againstHead(d),
      el("ol", { class: "ancestors" }, [...d.ancestors, d.node].map(a => el("li", {}, link(a), ` ${pct(a.total_pct)}`, a.diff ? [" ", changeCell(a.diff)] : null))),
      table(cols, d.children.rows));
  },
};

// onChartPick is what the stack chart's view does with the box clicked
// in its frame, which the chart posts to the page; null until that view
// sets it. onFlamePick is the flame graph's, for the frame clicked.
let onChartPick = null, onFlamePick = null;
window.addEventListener("message", e => {
  if (e.origin !== location.origin || !e.data) return;
  if (e.data.rbscope === "stackchart" && onChartPick) onChartPick(e);
  if (e.data.rbscope === "flame" && onFlamePick) onFlamePick(e);
});

// flameStartKey is where the page remembers the frame the flame graph
// starts from (localStorage): "start here" sets it, "forget" clears it.
const flameStartKey = "rbscope.flameStart";

// againstPick offers the other open recordings to compare a profile
// view's recording with (its before parameter), and none.
async function againstPick(f, viewName, p) {
  const others = (await api("files", {})).files.filter(x => x.kind === "profile" && x.state === "ready" && String(x.id) !== String(f));
  if (!others.length) return null;
  const base = `/profile/${f}/${viewName}`;
  return el("p", { class: "pivot", id: "against-pick" }, "Colour by the change against: ",
    others.map((x, k) => [k ? " · " : "", el("a", { href: hashFor(base, { ...p, offset: undefined, before: x.id }), class: String(x.id) === p.before ? "on" : "" }, x.name)]),
    p.before !== undefined ? [" · ", el("a", { href: hashFor(base, { ...p, offset: undefined, before: undefined }) }, "none (red: more of the samples than there, blue: fewer)")] : null);
}

// againstHead says what a view compared with another recording compares.
function againstHead(d) {
  if (!d.before) return null;
  return el("p", { class: "summary", id: "against" }, `Against ${d.before.file}: ${num(d.before.samples)} samples. Shares are of each recording's samples; changes in points, coloured as the differential flame graph is.`);
}

// changeCell shows a change of a share, in points, on the colour the
// differential flame graph gives it.
function changeCell(diff) {
  const c = el("span", { class: "change" }, (diff.change > 0 ? "+" : "") + diff.change.toFixed(2));
  c.style.background = diff.color;
  if (Math.abs(diff.change) > 3) c.style.color = "#fff"; // on the deeper colours
  return c;
}

// diffCols are the columns of a row compared with another recording: its
// share of the samples before, after (when not shown already) and the
// change.
function diffCols(withAfter) {
  return [
    { label: "Before %", num: true, cell: r => pct(r.diff.before_pct) },
    withAfter ? { label: "After %", num: true, cell: r => pct(r.diff.after_pct) } : null,
    { label: "Change", num: true, cell: r => changeCell(r.diff) },
  ].filter(c => c);
}

// transforms lists the transforms a view's t parameter holds, a line each
// (focus:FUNCTION, drop:FUNCTION, merge:FUNCTION, time:FROM-TO,
// thread:NAME|TID, endpoint:NAME, job:NAME).
function transforms(p) { return (p.t || "").split("\n").filter(x => x); }

// transformsBar shows the transforms applied to the view, each with a
// link that takes it off, and one that takes them all off.
function transformsBar(f, viewName, p) {
  const ts = transforms(p);
  if (!ts.length) return null;
  const keep = q => ({ ...p, t: q.join("\n") });
  const range = timeRange(p);
  return el("p", { class: "pivot", id: "transforms" }, "Transforms: ",
    ts.map((x, k) => [k ? " · " : "", x.replace(":", " "), " ", el("a", { href: hashFor(`/profile/${f}/${viewName}`, keep(ts.filter((_, j) => j !== k))), title: "take it off" }, "✕")]),
    " · ", el("a", { href: hashFor(`/profile/${f}/${viewName}`, keep([])) }, "none"),
    range ? [" · ", el("span", { id: "range" }, `time kept: ${secs(range.from, range.to === null ? undefined : range.to - range.from)}–${range.to === null ? "the end" : secs(range.to, range.to - range.from) + " s, " + span(range.to - range.from)}`), " ",
      el("a", { href: hashFor(`/profile/${f}/${viewName}`, { ...p, offset: undefined, zoom: undefined, t: withRange(p, null) }), id: "range-clear", title: "keep all the time (Esc)" }, "clear")] : null);
}

// cutsBar offers to cut the view to one of its threads, endpoints or
// jobs (the transforms thread:, endpoint: and job:, as record, report
// and top's --thread, --endpoint and --job), each with its samples; a
// cut already applied is taken off in the transforms bar.
async function cutsBar(f, viewName, p) {
  const d = await api("profile/cuts", { f, t: p.t || "" });
  const ts = transforms(p);
  const links = (what, rows, label) => rows.length > 1 || (rows.length === 1 && !ts.includes(rows[0].cut)) ? [
    el("span", { class: "cut-kind" }, what + ": "),
    rows.slice(0, 12).map((r, k) => [k ? " · " : "", el("a", {
      href: hashFor(`/profile/${f}/${viewName}`, { ...p, offset: undefined, node: undefined, t: [...ts, r.cut].join("\n") }),
      class: "cut", "data-cut": r.cut, title: `${num(r.samples)} samples (${pct(100 * r.samples / Math.max(d.samples, 1))})`,
    }, label(r))]),
    rows.length > 12 ? ` and ${rows.length - 12} more` : "", ". "] : null;
  const parts = [
    links("thread", d.threads, r => `${r.name} (tid ${r.tid})`),
    links("endpoint", d.endpoints, r => r.name),
    links("job", d.jobs, r => r.name),
  ].filter(x => x);
  if (!parts.length) return null;
  return el("p", { class: "pivot", id: "cuts" }, "Cut by ", parts);
}

// timeRange is the time the time windows of p's transforms keep,
// { from, to } in seconds (to null: to the end), or null without one.
function timeRange(p) {
  let from = null, to = null;
  for (const x of transforms(p)) {
    const m = /^time:([^-]*)-(.*)$/.exec(x);
    if (!m) continue;
    const a = Number(m[1]), b = m[2] === "" ? null : Number(m[2]);
    from = from === null ? a : Math.max(from, a);
    if (b !== null) to = to === null ? b : Math.min(to, b);
  }
  return from === null ? null : { from, to };
}

// withRange is p's transforms with their time windows replaced by one
// from from to to seconds (none when from is null), as the t parameter
// writes them.
function withRange(p, from, to) {
  const rest = transforms(p).filter(x => !x.startsWith("time:"));
  if (from !== null) rest.push(`time:${secs(from, to - from)}-${secs(to, to - from)}`);
  return rest.join("\n");
}

// secs writes a time in seconds to the millisecond, or, as a bound of a
// range shorter than a second (within), to a thousandth of the range (to
// the microsecond at most).
function secs(v, within) {
  const digits = within > 0 && within < 1 ? Math.min(6, Math.ceil(-Math.log10(within)) + 3) : 3;
  return Math.max(0, v).toFixed(digits);
}

// span writes a length of time as people read it: ms under a second.
function span(v) { return v < 1 ? (v * 1000).toFixed(1) + " ms" : v.toFixed(3) + " s"; }

// clearRange takes the time windows off the profile view shown, and its
// zoom.
function clearRange() {
  const r = route();
  if (r.parts[0] !== "profile" || r.parts.length < 3 || !timeRange(r.params)) return;
  location.hash = hashFor("/" + r.parts.join("/"), { ...r.params, offset: undefined, zoom: undefined, t: withRange(r.params, null) });
}

// minDrag is how far, in pixels, the pointer moves pressed before it
// drags out a time range rather than clicks.
const minDrag = 4;

// dragging is the drag under way, with what cancels it; null without one.
let dragging = null;

// selection draws a span of time over a timeline, from fraction a to
// fraction b of its tracks' width, labelled from..to seconds.
function selection(id, a, b, from, to) {
  // The length is that of the bounds as written, so that the three
  // numbers agree (0.489–1.498 s: 1.009 s, not 1.010).
  const f = secs(from, to - from), t = secs(to, to - from);
  const box = el("div", { class: "selection", id }, el("span", { class: "selection-label" }, `${f}–${t} s: ${span(Number(t) - Number(f))}`));
  box.style.setProperty("--a", String(Math.max(0, Math.min(1, a))));
  box.style.setProperty("--b", String(Math.max(0, Math.min(1, b))));
  box.dataset.from = String(from);
  box.dataset.to = String(to);
  return box;
}

// dragSelect lets the pointer drag across area's tracks, whose cells
// ruler() spans, to pick a span of time: timeAt turns a fraction of the
// ruler's width into seconds; pick gets the range on release. A press
// released before moving minDrag pixels stays a click.
function dragSelect(area, ruler, timeAt, pick) {
  area.addEventListener("mousedown", e => {
    const r = ruler();
    if (e.button !== 0 || !r) return;
    const box = r.getBoundingClientRect();
    if (e.clientX < box.left || e.clientX > box.right) return;
    e.preventDefault(); // neither drags the stretch's link nor selects text
    const x0 = e.clientX;
    let moved = false, shown = null, a = 0, b = 0;
    const frac = x => Math.max(0, Math.min(1, (x - box.left) / box.width));
    const move = ev => {
      if (!moved && Math.abs(ev.clientX - x0) < minDrag) return;
      moved = true;
      a = frac(Math.min(x0, ev.clientX));
      b = frac(Math.max(x0, ev.clientX));
      const next = selection("selection", a, b, timeAt(a), timeAt(b));
      if (shown) shown.replaceWith(next); else area.append(next);
      shown = next;
    };
    const stop = () => {
      window.removeEventListener("mousemove", move);
      window.removeEventListener("mouseup", up);
      dragging = null;
    };
    const up = ev => {
      stop();
      if (!moved) return;
      // The click that follows the release is the drag's, not a
      // stretch's.
      const swallow = c => { c.preventDefault(); c.stopPropagation(); };
      window.addEventListener("click", swallow, { capture: true, once: true });
      setTimeout(() => window.removeEventListener("click", swallow, { capture: true }), 0);
      if (b > a) pick(timeAt(a), timeAt(b));
    };
    window.addEventListener("mousemove", move);
    window.addEventListener("mouseup", up);
    dragging = { cancel() { stop(); if (shown) shown.remove(); } };
  });
}

// Esc drops a drag under way, or else the time range of the view.
document.addEventListener("keydown", e => {
  if (e.key !== "Escape" || (e.target.closest && e.target.closest("input, textarea, select"))) return;
  if (dragging) { dragging.cancel(); return; }
  clearRange();
});

// transformLinks offers focus, drop and merge on function fn.
function transformLinks(f, viewName, p, fn) {
  const add = op => hashFor(`/profile/${f}/${viewName}`, { ...p, offset: undefined, t: [...transforms(p), op + ":" + fn].join("\n") });
  return el("span", { class: "transform-links" },
    el("a", { href: add("focus"), title: "keep only the samples through it, from it down" }, "focus"), " ",
    el("a", { href: add("drop"), title: "leave out the samples through it" }, "drop"), " ",
    el("a", { href: add("merge"), title: "take its frames out, its time to its caller" }, "merge"));
}

function profileTabs(f, active, t) {
  return el("nav", { class: "tabs" },
    el("a", { href: hashFor(`/profile/${f}/functions`, { t }), class: active === "functions" ? "on" : "" }, "Functions"),
    el("a", { href: hashFor(`/profile/${f}/flame`, { t }), class: active === "flame" ? "on" : "" }, "Flame graph"),
    el("a", { href: hashFor(`/profile/${f}/tree`, { t }), class: active === "tree" ? "on" : "" }, "Call tree"),
    el("a", { href: hashFor(`/profile/${f}/timeline`, { t }), class: active === "timeline" ? "on" : "", id: "timeline-tab" }, "Timeline"),
    el("a", { href: hashFor(`/profile/${f}/stack`, { t }), class: active === "stack" ? "on" : "", id: "stack-tab" }, "Stack chart"),
    el("a", { href: hashFor(`/profile/${f}/diff`), class: active === "diff" ? "on" : "", id: "profile-diff-tab" }, "Compare"),
    el("a", { href: `/pprof/${f}/`, target: "_blank", rel: "noopener", id: "pprof-link" }, "pprof ↗"));
}

function profileHead(d) {
  return el("p", { class: "summary" }, `${d.file}: ${num(d.samples)} samples in ${d.seconds.toFixed(1)} s at ${d.rate} Hz (${num(d.ticks)} ticks, ${num(d.errors)} errors). ${d.breakdown}`);
}

async function render() {
  const gen = ++generation;
  const r = route();
  view.dataset.state = "loading";
  let name = "files", args = [];
  if (r.parts.length >= 3) { name = r.parts[0] + "/" + r.parts[2]; args = [r.parts[1], r.params]; }
  else if (r.parts.length === 1) { name = r.parts[0]; args = [null, r.params]; }
  const v = views[name];
  try {
    if (!v) throw new Error("no such view: " + location.hash);
    await v(gen, ...args);
  } catch (e) {
    show(gen, "error", el("p", { class: "error", id: "error" }, e.message), el("p", {}, el("a", { href: "#/" }, "back to the files")));
  }
}

window.addEventListener("hashchange", render);
render();

// Dropping a file sends it to the server (a POST with the CSRF token).
const drop = document.getElementById("drop");
document.addEventListener("dragover", e => { e.preventDefault(); drop.hidden = false; });
document.addEventListener("dragleave", e => { if (!e.relatedTarget) drop.hidden = true; });
document.addEventListener("drop", async e => {
  e.preventDefault();
  drop.hidden = true;
  for (const file of e.dataTransfer.files) {
    const r = await fetch("/api/upload?name=" + encodeURIComponent(file.name), {
      method: "POST", body: file, credentials: "same-origin", headers: { "X-CSRF-Token": csrf },
    });
    if (!r.ok) {
      const b = await r.json().catch(() => ({}));
      alert("Could not open " + file.name + ": " + (b.error || r.status));
    }
  }
  location.hash = "#/";
  render();
});
