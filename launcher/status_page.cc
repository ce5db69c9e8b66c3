#include "launcher/status_page.h"

namespace meshrt::launcher {

std::string_view status_page_html() {
  // The job's token comes in the page's own URL (?token=...), which only the job's owner has;
  // every request of the script passes it on.
  static constexpr std::string_view kPage = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>meshrun: live status</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.2em;color:#222}
h1{font-size:1.25em;margin:0 0 .4em}
#verdict{padding:.6em .8em;border-radius:4px;margin:.6em 0;font-family:monospace;white-space:pre-wrap}
#verdict.stall{background:#fde2e1;border:1px solid #d33}
#verdict.ok{background:#e3f4e1;border:1px solid #5a5}
table{border-collapse:collapse;margin:.6em 0}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;font-family:monospace;vertical-align:top}
th{background:#f3f3f3}
td.slow{background:#fde2e1}
td.busy{background:#fff6d8}
.muted{color:#777}
#mesh{border-collapse:separate;border-spacing:6px}
#mesh td{border:2px solid #bbb;border-radius:6px;padding:.4em .6em;min-width:11em}
#mesh td.in_op{background:#fff6d8}
#mesh td.user_code,#mesh td.between_ops{background:#e3f4e1}
#mesh td.finished,#mesh td.ended{background:#e6e6e6}
#mesh td.silent{background:#d9d9f5}
#mesh td.waiting{background:#fde2e1}
#mesh td.culprit{border:5px solid #ff00aa;background:#ffd6f0}
#mesh .who{font-weight:bold}
#mesh .wait{color:#b00;font-weight:bold}
#events{font-family:monospace;white-space:pre-wrap}
</style></head>
<body>
<h1>meshrun: live status</h1>
<div id="job" class="muted">loading /status.json ...</div>
<div id="verdict" class="ok"></div>
<div id="meshname" class="muted"></div>
<table id="mesh"></table>
<table id="ranks"></table>
<h2 style="font-size:1.05em">Events</h2>
<div id="events" class="muted"></div>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token");
const q = token ? "?token=" + encodeURIComponent(token) : "";
function secs(ms) { return (ms / 1000).toFixed(1) + " s"; }
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}
function link(href, text) { const a = el("a", text); a.href = href + q; return a; }
// A p2p op by its number on its channel, as both ends and meshtrace count it.
function opText(f) {
  if (f.p2p && f.peer >= 0) return f.op + " #" + f.channel_seq + (f.op === "send" ? " to" : " from") +
                                   " rank " + f.peer;
  return f.op + " #" + f.seq;
}
function cellText(c) {
  const f = c.in_flight;
  if (f) return opText(f) + " running " + secs(f.running_ms);
  return "idle, completed #" + c.completed + (c.enqueued > c.completed ? ", queued #" + c.enqueued : "");
}
// The mesh, from the communicators' dims: each dim's groups list their members; a dim's stride
// (member gap) orders dims outermost first, and a rank's place in its group of a dim is its
// coordinate there. Rows are the outer dims, columns the innermost.
function drawMesh(s) {
  const dims = {};
  for (const r of s.ranks) for (const c of r.comms) {
    if (!c.mesh_dim || !c.ranks || c.ranks.length < 2) continue;
    const d = dims[c.mesh_dim] || (dims[c.mesh_dim] = {name: c.mesh_dim, comm: c.name, at: {}});
    d.size = c.ranks.length;
    d.stride = c.ranks[1] - c.ranks[0];
    c.ranks.forEach((g, i) => { d.at[g] = i; });
  }
  // Flattened dims ("dp_tp") span others: keep dims no other dim lies within.
  let order = Object.values(dims).filter(d => !d.name.includes("_")).sort((a, b) => b.stride - a.stride);
  const t = document.getElementById("mesh");
  t.replaceChildren();
  if (!order.length) { document.getElementById("meshname").textContent = ""; return; }
  document.getElementById("meshname").textContent = "mesh " + order.map(d => d.name + " " + d.size).join(" x ") +
      (s.stall && s.stall.culprits.length ? "; culprit outlined, ranks waiting for it marked" : "");
  const inner = order[order.length - 1], outer = order.slice(0, -1);
  const culprits = s.stall ? s.stall.culprits : [];
  const rows = {};
  for (const r of s.ranks) {
    if (order.some(d => d.at[r.rank] === undefined)) continue;
    const key = outer.map(d => d.name + " " + d.at[r.rank]).join(", ");
    (rows[key] || (rows[key] = []))[inner.at[r.rank]] = r;
  }
  const head = el("tr");
  if (outer.length) head.append(el("th"));
  for (let i = 0; i < inner.size; ++i) head.append(el("th", inner.name + " " + i));
  t.append(head);
  for (const key of Object.keys(rows).sort()) {
    const tr = el("tr");
    if (outer.length) tr.append(el("th", key));
    for (const r of rows[key]) {
      if (!r) { tr.append(el("td", "-", "muted")); continue; }
      const silent = r.age_ms > 3000 && r.state !== "ended";
      const cell = el("td", undefined, silent ? "silent" : r.state);
      cell.id = "cell-" + r.rank;
      cell.append(el("div", "rank " + r.rank + (silent ? " (silent)" : ""), "who"));
      cell.append(el("div", r.state === "ended" ? "process " + r.ended :
                            r.state.replace("_", " ") + " " + secs(r.state_ms)));
      let waits = false;
      for (const d of order) {
        const c = r.comms.find(x => x.name === d.comm || x.mesh_dim === d.name);
        if (!c) continue;
        const f = c.in_flight;
        cell.append(el("div", d.name + ": " + (f ? opText(f) + " " + secs(f.running_ms)
                                                : "idle #" + c.completed)));
        const late = f && s.stall_threshold_s > 0 && f.running_ms >= s.stall_threshold_s * 1000;
        if (late && culprits.some(x => x !== r.rank && c.ranks.includes(x))) waits = true;
      }
      if (culprits.includes(r.rank)) {
        cell.className = "culprit";
        cell.append(el("div", "culprit", "wait"));
      } else if (waits) {
        cell.className = "waiting";
        cell.append(el("div", "→ waits for rank " + culprits.join(", "), "wait"));
      }
      tr.append(cell);
    }
    t.append(tr);
  }
}
function draw(s) {
  drawMesh(s);
  const job = document.getElementById("job");
  job.textContent = "job " + s.run_id + (s.running ? ", attempt " + s.attempt + ", " +
      s.world_size + " ranks" : ", no attempt running") + "; stall threshold " +
      (s.stall_threshold_s > 0 ? s.stall_threshold_s + " s" : "off") + "; updated " +
      new Date(s.wall_ns / 1e6).toLocaleTimeString();
  const v = document.getElementById("verdict");
  v.textContent = s.verdict ? s.verdict.line : "no stall";
  v.className = s.verdict ? "stall" : "ok";
  const names = [];
  for (const r of s.ranks) for (const c of r.comms) if (!names.includes(c.name)) names.push(c.name);
  names.sort();
  const dims = {};
  for (const r of s.ranks) for (const c of r.comms) if (c.mesh_dim) dims[c.name] = c.mesh_dim;
  const t = document.getElementById("ranks");
  t.replaceChildren();
  const head = el("tr");
  head.append(el("th", "rank"), el("th", "state"));
  for (const n of names) head.append(el("th", n + (dims[n] ? " (dim " + dims[n] + ")" : "")));
  head.append(el("th", "live"));
  t.append(head);
  for (const r of s.ranks) {
    const row = el("tr");
    row.id = "rank-" + r.rank;
    row.append(el("td", "rank " + r.rank),
               el("td", r.state === "ended" ? "process " + r.ended :
                        r.state === "unknown" ? "no record yet" :
                        r.state.replace("_", " ") + " for " + secs(r.state_ms) +
                        (r.age_ms > 3000 ? " (record " + secs(r.age_ms) + " old: silent)" : ""),
                  r.age_ms > 3000 && r.state !== "ended" ? "slow" : ""));
    for (const n of names) {
      const c = r.comms.find(x => x.name === n);
      if (!c) { row.append(el("td", "-", "muted")); continue; }
      const f = c.in_flight;
      const slow = f && s.stall_threshold_s > 0 && f.running_ms >= s.stall_threshold_s * 1000;
      row.append(el("td", cellText(c), slow ? "slow" : (f ? "busy" : "")));
    }
    const live = el("td");
    live.append(link("ranks/" + r.rank + "/snapshot", "snapshot"), " ",
                link("ranks/" + r.rank + "/stacks", "stacks"));
    row.append(live);
    t.append(row);
  }
  document.getElementById("events").textContent = s.events.length ?
      s.events.map(e => new Date(e.wall_ns / 1e6).toLocaleTimeString() + "  " + e.line).join("\n") :
      "none";
}
async function refresh() {
  try {
    const r = await fetch("status.json" + q, {cache: "no-store"});
    if (!r.ok) throw new Error(r.status + " " + r.statusText);
    draw(await r.json());
  } catch (e) {
    document.getElementById("job").textContent = "cannot read status.json: " + e.message +
        " (has the job ended?)";
  }
}
refresh();
setInterval(refresh, 1000);
</script>
</body></html>
)html";
  return kPage;
}

}  // namespace meshrt::launcher
