// The node's status page. Everything shown comes from the node's own JSON and is put
// into the page with textContent only: worker texts (which may hold HTML or script) are
// always shown as text. Live updates arrive as server-sent events from /events.
"use strict";

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function shortHex(h) {
  return typeof h === "string" && h.length > 14 ? h.slice(0, 8) + "…" + h.slice(-4) : (h || "");
}

function age(unix) {
  if (!unix) return "";
  const s = Math.max(0, Math.round(Date.now() / 1000 - unix));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  return Math.round(s / 3600) + " h ago";
}

function stateBadge(state) {
  return el("span", state, "state state-" + state);
}

function workerLine(w) {
  const parts = [];
  if (w.failure) {
    parts.push("failed (" + w.failure + ")");
  } else {
    parts.push(w.answer || "—");
    if (w.confidence !== null && w.confidence !== undefined) parts.push(Number(w.confidence).toFixed(2));
    if (w.scores) parts.push(w.scores.join("/"));
    if (w.weight !== null && w.weight !== undefined) parts.push("w=" + w.weight);
    if (w.payout_eth) parts.push("pays " + w.payout_eth + " ETH");
  }
  return el("div", shortHex(w.address) + "  " + parts.join(" · "), "worker mono");
}

function txSummary(r) {
  const box = el("div", null, "mono");
  for (const t of r.transactions || []) {
    box.appendChild(el("div", "nonce " + t.nonce + ": " + t.state + ", " + t.attempts + " attempt(s)" + (t.mined_tx ? " → " + shortHex(t.mined_tx) : "")));
  }
  if (r.confirmation) {
    box.appendChild(el("div", r.confirmation.status + (r.confirmation.block_number ? " in block " + r.confirmation.block_number : "")));
  }
  if (r.don) {
    const d = r.don;
    const set = d.set || [];
    box.appendChild(el("div", "DON: report built from " + set.length + " of " + d.members + " members' observations" +
      ((d.missing || []).length ? " (missing: " + d.missing.map(shortHex).join(", ") + ")" : "") +
      ", leader " + shortHex(d.leader) + " (attempt " + d.attempt + ")"));
    box.appendChild(el("div", "signed by " + (d.signers || []).map(shortHex).join(", ") +
      (d.transmitter ? "; transmitted by " + shortHex(d.transmitter) : "")));
  }
  if (r.finality) {
    const f = r.finality;
    let text = f.status === "final" ? "final (finalized block " + f.finalized_block + ", by " + f.source + ")" : "reorged: re-sent";
    if (f.reorgs) text += ", " + f.reorgs + " reorg(s) seen";
    box.appendChild(el("div", text));
  }
  return box;
}

function outcomeText(o) {
  if (!o) return "—";
  if (o.resolution === null || o.resolution === undefined) return "none: " + (o.none || "");
  let t = o.resolution + " (weight " + Number(o.weight).toFixed(2) + " of " + (Number(o.yes_weight) + Number(o.no_weight)).toFixed(2) + ")";
  if (o.tie) t += ", a tie";
  if (o.pending) t += ", not yet confirmed";
  return t;
}

function renderChain(s) {
  const parts = [];
  if (s.chain_id !== undefined && s.chain_id !== null) parts.push("chain " + s.chain_id);
  if (s.head !== undefined && s.head !== null) parts.push("head " + s.head);
  if (s.lag_blocks !== undefined && s.lag_blocks !== null) parts.push("watcher lag " + s.lag_blocks + " block(s)");
  if (s.status) parts.push(s.status);
  $("chain").textContent = parts.join(" · ");
}

let cursors = [null]; // cursors of the pages seen: [0] is the newest page
let page = 0;

function renderList(data) {
  const body = $("rounds-body");
  body.replaceChildren();
  for (const r of data.rounds) {
    const tr = el("tr");
    tr.dataset.marketId = r.market_id;
    tr.dataset.state = r.state;
    const id = el("td", null, "mono");
    const a = el("a", r.market_id);
    a.href = "/?round=" + encodeURIComponent(r.market_id);
    id.appendChild(a);
    tr.appendChild(id);
    const st = el("td");
    st.appendChild(stateBadge(r.state));
    tr.appendChild(st);
    const q = r.quorum;
    tr.appendChild(el("td", q ? (q.met ? "met" : "not met") + " (" + q.valid + "/" + q.required + " of " + q.registered + ")" : "—"));
    const out = el("td", outcomeText(r.outcome), "outcome");
    tr.appendChild(out);
    const ws = el("td");
    for (const w of r.workers || []) ws.appendChild(workerLine(w));
    tr.appendChild(ws);
    const tx = el("td");
    tx.appendChild(txSummary(r));
    tr.appendChild(tx);
    tr.appendChild(el("td", r.reason || ""));
    tr.appendChild(el("td", r.holder || r.driven_by || "", "mono"));
    tr.appendChild(el("td", age(r.updated_at)));
    body.appendChild(tr);
  }
  if (data.rounds.length === 0) {
    const tr = el("tr");
    const td = el("td", "no rounds yet");
    td.colSpan = 9;
    tr.appendChild(td);
    body.appendChild(tr);
  }
  cursors[page + 1] = data.next;
  $("older").disabled = data.next === null || data.next === undefined;
  $("newer").disabled = page === 0;
}

async function loadPage() {
  const c = cursors[page];
  const url = "/status/rounds" + (c === null || c === undefined ? "" : "?cursor=" + encodeURIComponent(c));
  const resp = await fetch(url);
  if (!resp.ok) return;
  const data = await resp.json();
  renderChain(data);
  renderList(data);
}

function hexList(xs) {
  return (xs || []).map(shortHex).join(", ");
}

// The DON panel: this member's consensus now and the executions it decided lately
// (GET /status/don; null on a node that is not a member, and the panel stays hidden).
function renderDon(d) {
  const view = $("don-view");
  if (!d) {
    view.hidden = true;
    return;
  }
  view.hidden = false;
  $("don-summary").textContent = "member " + shortHex(d.member) + " of " + d.members.length +
    " (f = " + d.f + ", quorum " + d.quorum + "); " + d.books + " book(s), " + d.book_bytes + " bytes waiting";
  const live = $("don-live");
  live.replaceChildren();
  for (const x of d.executions || []) {
    live.appendChild(el("div", "in consensus: " + shortHex(x.execution_id) + " round " + x.round +
      " (" + x.step + "), leader " + shortHex(x.leader) + ", " + x.leader_changes + " leader change(s)"));
  }
  const body = $("don-decided-body");
  body.replaceChildren();
  for (const x of d.decided || []) {
    const tr = el("tr");
    tr.dataset.executionId = x.execution_id;
    for (const [text, cls] of [
      [shortHex(x.execution_id), "mono"],
      [BigInt(x.market_id).toString(), "mono"],
      [x.round, null],
      [shortHex(x.leader), "mono"],
      [x.leader_changes === null ? "—" : x.leader_changes, null],
      [hexList(x.set), "mono"],
      [hexList(x.precommits), "mono"],
      [hexList(x.signers), "mono"],
      [x.transmitter ? shortHex(x.transmitter) : "—", "mono"],
      [age(x.decided_at), null],
    ]) {
      tr.appendChild(el("td", text, cls));
    }
    body.appendChild(tr);
  }
  if ((d.decided || []).length === 0) {
    const tr = el("tr");
    const td = el("td", "nothing decided since the node started");
    td.colSpan = 10;
    tr.appendChild(td);
    body.appendChild(tr);
  }
}

async function loadDon() {
  const resp = await fetch("/status/don");
  if (!resp.ok) return;
  renderDon(await resp.json());
}

function fact(dl, name, value) {
  dl.appendChild(el("dt", name));
  dl.appendChild(el("dd", value === null || value === undefined ? "—" : value, "mono"));
}

async function loadRound(id) {
  const resp = await fetch("/status/rounds/" + encodeURIComponent(id));
  const title = $("round-title");
  if (!resp.ok) {
    title.textContent = "market " + id + ": no such round";
    return;
  }
  const r = await resp.json();
  title.replaceChildren(el("span", "market " + r.market_id + " "), stateBadge(r.state));
  document.body.dataset.roundState = r.state;
  const dl = $("round-facts");
  dl.replaceChildren();
  fact(dl, "market contract", r.market);
  fact(dl, "attempt", r.attempt);
  fact(dl, "question", r.question);
  fact(dl, "request", r.request_tx ? r.request_tx + " (block " + r.request_block + ")" : null);
  fact(dl, "quorum", r.quorum ? (r.quorum.met ? "met" : "not met") + " (" + r.quorum.valid + "/" + r.quorum.required + " of " + r.quorum.registered + ")" : null);
  fact(dl, "resolution", outcomeText(r.outcome));
  fact(dl, "reason", r.reason);
  fact(dl, "holder", r.holder || r.driven_by);
  const workers = $("round-workers");
  workers.replaceChildren();
  for (const w of r.workers || []) {
    const box = el("div", null, "worker-box");
    box.appendChild(workerLine(w));
    if (w.evidence) box.appendChild(el("pre", w.evidence, "evidence"));
    workers.appendChild(box);
  }
  const txs = $("round-txs");
  txs.replaceChildren(txSummary(r));
  $("round-transcript").textContent = JSON.stringify(r.transcript, null, 2);
}

function connect(onEvent) {
  const es = new EventSource("/events");
  es.addEventListener("rounds", (ev) => {
    $("live").classList.add("on");
    $("live").textContent = "● live";
    onEvent(JSON.parse(ev.data));
  });
  es.onerror = () => {
    $("live").classList.remove("on");
    $("live").textContent = "○ reconnecting";
  };
}

document.addEventListener("DOMContentLoaded", () => {
  const round = new URLSearchParams(location.search).get("round");
  if (round !== null) {
    $("list-view").hidden = true;
    $("round-view").hidden = false;
    loadRound(round);
    connect((data) => {
      renderChain(data);
      loadRound(round);
    });
    return;
  }
  $("older").addEventListener("click", () => { page += 1; loadPage(); });
  $("newer").addEventListener("click", () => { page = 0; loadPage(); });
  connect((data) => {
    renderChain(data);
    if (page === 0) renderList(data);
    loadDon();
  });
  loadPage();
  loadDon();
});
