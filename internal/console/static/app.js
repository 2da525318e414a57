// Keel console: a hash-routed single page over the JSON API in /api/.
// Plain JavaScript, no build step. Every value from the server is escaped
// before it goes into the page.
"use strict";

const app = document.getElementById("app");
let info = { write: false, version: "" };
let refreshTimer = null;

// ---- helpers ----------------------------------------------------------

function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function num(n) { return n == null || n < 0 ? "–" : Number(n).toLocaleString("en-US"); }
function bytes(n) {
  if (n == null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
function when(t) {
  if (!t) return "–";
  const d = typeof t === "number" ? new Date(t) : new Date(t);
  if (isNaN(d) || d.getTime() <= 0) return "–";
  return d.toLocaleString("sv-SE").replace("T", " ");
}
function ago(ms) {
  const s = Math.round(ms / 1000);
  if (s < 90) return s + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  return (s / 3600).toFixed(1) + " h";
}
function enc(s) { return encodeURIComponent(s); }
// count is n and the word for one or for many: "1 queue", "2 queues".
function count(n, one, many) { return num(n) + " " + (n === 1 ? one : many || one + "s"); }
function link(page, arg, text) { return `<a href="#/${page}/${enc(arg)}">${esc(text ?? arg)}</a>`; }
function kindPill(kind) { return `<span class="pill ${esc(kind)}">${esc(kind)}</span>`; }
function perm(p) { return (p & 4 ? "R" : "-") + (p & 2 ? "W" : "-"); }

// slaveReads collects, while a page renders, what the API says it read
// from slaves because their group's master is missing (X-Keel-Slave-Reads).
let slaveReads = new Set();
async function api(path, opts) {
  const res = await fetch("api/" + path, opts);
  const sr = res.headers.get("X-Keel-Slave-Reads");
  if (sr) sr.split(" | ").forEach(l => slaveReads.add(l));
  let body = null;
  try { body = await res.json(); } catch (e) { /* not JSON */ }
  if (!res.ok) {
    const e = new Error((body && body.error) || res.status + " " + res.statusText);
    e.status = res.status;
    e.again = !!(body && body.again);
    throw e;
  }
  return body;
}
function post(path, data) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json", "X-Keel-Console": "1" }, body: JSON.stringify(data) });
}

function errorBox(e) { return `<div class="err" role="alert">${esc(e.message || e)}</div>`; }
function stamp() { document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString("sv-SE"); }

// table(columns, rows): columns are [title, render(row), className].
function table(cols, rows, empty) {
  if (!rows.length) return `<p class="muted">${esc(empty || "Nothing here yet.")}</p>`;
  const head = cols.map(c => `<th class="${c[2] || ""}">${esc(c[0])}</th>`).join("");
  const body = rows.map(r => "<tr>" + cols.map(c => `<td class="${c[2] || ""}">${c[1](r)}</td>`).join("") + "</tr>").join("");
  return `<table><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

function lagCell(lag, maxLag) {
  const pct = maxLag > 0 ? Math.max(2, Math.round(100 * lag / maxLag)) : 0;
  return `<span class="lag">${num(lag)}<span class="bar ${lag > 0 && pct > 66 ? "hot" : ""}"><span style="width:${lag > 0 ? pct : 0}%"></span></span></span>`;
}

// chart draws a line chart of points [{t: Date|string, v: number}].
function chart(points, label, fmt) {
  fmt = fmt || num;
  if (points.length < 2) return `<p class="muted">Collecting data… (${esc(label)} appears after two samples)</p>`;
  const W = 600, H = 160, L = 56, B = 22, T = 8;
  const xs = points.map(p => new Date(p.t).getTime()), ys = points.map(p => p.v);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y1 = Math.max(1, ...ys);
  const X = x => L + (W - L - 8) * (x - x0) / Math.max(1, x1 - x0);
  const Y = y => T + (H - T - B) * (1 - y / y1);
  const path = points.map((p, i) => (i ? "L" : "M") + X(xs[i]).toFixed(1) + " " + Y(ys[i]).toFixed(1)).join(" ");
  const area = path + ` L ${X(x1).toFixed(1)} ${H - B} L ${X(x0).toFixed(1)} ${H - B} Z`;
  const t = d => new Date(d).toLocaleTimeString("sv-SE").slice(0, 5);
  return `<svg class="chart" viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" role="img" aria-label="${esc(label)}">
    <line class="axis" x1="${L}" y1="${H - B}" x2="${W}" y2="${H - B}"/><line class="axis" x1="${L}" y1="${T}" x2="${W}" y2="${T}"/>
    <path class="area" d="${area}"/><path class="line" d="${path}"/>
    <text x="${L - 6}" y="${T + 10}" text-anchor="end">${esc(fmt(y1))}</text><text x="${L - 6}" y="${H - B}" text-anchor="end">0</text>
    <text x="${L}" y="${H - 6}">${esc(t(x0))}</text><text x="${W}" y="${H - 6}" text-anchor="end">${esc(t(x1))}</text></svg>`;
}

// ---- pages ------------------------------------------------------------

const pages = {
  async overview() {
    const o = await api("overview");
    const local = o.local ? diskPanel(o.local) : "";
    return `<h1>Overview</h1>
    <div class="cards">
      ${card("Brokers", o.brokers.length)}${card("User topics", o.topics, false, kindsNote(o.topicKinds))}${card("Messages stored", o.messages)}
      ${card("Consumer groups", o.groups)}${card("Total lag", o.lag, o.lag > 0)}${card("Dead letters", o.dlqMessages, o.dlqMessages > 0)}
    </div>
    <div class="grid2">
      <div class="panel"><h2>Throughput (messages/s)</h2>${chart(o.throughput.map(p => ({ t: p.time, v: p.messagesPerSec })), "throughput", v => v.toFixed(1))}</div>
      <div class="panel"><h2>Total consumer lag</h2>${chart(o.lagHistory.map(p => ({ t: p.time, v: p.lag })), "lag")}</div>
    </div>
    ${local}
    ${latencyPanel(o.brokers)}
    <div class="panel"><h2>Brokers</h2>${table([
      ["Broker", b => esc(b.brokerName)], ["Id", b => b.brokerId === 0 ? "master" : esc(b.brokerId)],
      ["Cluster", b => esc(b.cluster)], ["Address", b => `<span class="mono">${esc(b.addr)}</span>`],
      ["Keel version", b => esc(b.info && b.info.keelVersion ? b.info.keelVersion : "–")],
      ["RocketMQ protocol", b => b.info ? `<span title="the RocketMQ version this broker reports to clients">${esc(b.info.brokerVersionDesc)}</span>` : "–"],
      ["CommitLog", b => b.info ? bytes(Number(b.info.commitLogMaxOffset)) : "–", "num"],
      ["Held pulls", b => b.info ? num(b.info.heldPullRequests) : "–", "num"],
      ["Status", b => b.error ? `<span class="pill dlq">${esc(b.error)}</span>` : `<span class="pill ok">up</span>`],
    ], o.brokers, "No broker is registered.")}</div>`;
  },

  async topics(_, q) {
    const all = q.get("all") === "1";
    const every = await api("topics?all=1");
    const kinds = { normal: 0, retry: 0, dlq: 0, system: 0 };
    every.forEach(t => { kinds[t.kind] = (kinds[t.kind] || 0) + 1; });
    const ts = all ? every : every.filter(t => t.kind !== "system");
    return `<h1>Topics <span class="sub" id="topic-counts">${num(kinds.normal)} user topic${kinds.normal === 1 ? "" : "s"} · ${kindsNote(kinds)}${all ? "" : " (system topics hidden)"}</span></h1>
    ${info.write ? createTopicForm() : ""}
    <div class="panel">
      <div class="filter"><input id="filter" placeholder="Filter topics…" oninput="filterRows(this.value)">
      <a href="#/topics${all ? "" : "?all=1"}" style="margin-left:12px">${all ? "Hide" : "Show"} system topics</a></div>
      ${table([
        ["Topic", t => link("topics", t.topic)], ["Kind", t => kindPill(t.kind)],
        ["Read queues", t => num(readQ(t)), "num"], ["Write queues", t => num(writeQ(t)), "num"],
        ["Perm", t => perm(t.brokers.length ? t.brokers[0].perm : 0)], ["Brokers", t => num(t.brokers.length), "num"],
        ["Messages", t => num(t.messages), "num"],
      ], ts, "No topics yet.")}</div>`;
  },

  async topic(name, q) {
    const d = await api("topics/" + enc(name));
    const from = q.get("from");
    let browsed = "";
    if (from) {
      try {
        const ms = await api(`topics/${enc(name)}/messages?from=${enc(from)}`);
        browsed = `<div class="panel" id="browse"><h2>Messages stored from ${esc(when(Number(from)))} <span class="sub">${num(ms.length)} shown, oldest first</span></h2>${table([
          ["Stored", m => esc(when(m.storeTime))], ["Broker", m => `<span class="mono">${esc(m.storeHost)}</span>`],
          ["Queue", m => num(m.queueId), "num"], ["Offset", m => num(m.queueOffset), "num"],
          ["Message ID", m => `<a class="mono" href="#/messages?id=${enc(m.msgId)}">${esc(m.msgId)}</a>`],
          ["Tags", m => esc(m.tags || "–")], ["Keys", m => esc(m.keys || "–")],
          ["Body", m => `<span class="clip">${esc((m.body || "(binary)").slice(0, 200))}</span>`],
        ], ms, "No message was stored at or after that time.")}</div>`;
      } catch (e) { browsed = errorBox(e); }
    }
    const fromValue = localInput(from ? Number(from) : Date.now() - 3600e3);
    return `<h1>${esc(d.topic)} <span class="sub">${kindPill(d.kind)}</span></h1>
    <div class="cards">${card("Messages stored", d.messages)}${card("Messages written", d.written)}${card("Queues", d.queues.length)}</div>
    <div class="panel"><h2>Configuration</h2>${table([
      ["Broker", b => esc(b.broker)], ["Read queues", b => num(b.readQueueNums), "num"], ["Write queues", b => num(b.writeQueueNums), "num"],
      ["Perm", b => perm(b.perm)], ["Order", b => b.order ? "yes" : "no"]], d.brokers)}</div>
    <div class="panel"><h2>Queues</h2>${table([
      ["Broker", q => esc(q.broker)], ["Queue", q => num(q.queueId), "num"], ["Min offset", q => num(q.minOffset), "num"],
      ["Max offset", q => num(q.maxOffset), "num"], ["Messages", q => num(q.messages), "num"]], d.queues)}</div>
    <form class="inline panel" onsubmit="return browseTopic(this, '${esc(enc(d.topic))}')">
      <label class="f">Browse messages stored from<input name="from" type="datetime-local" step="1" value="${esc(fromValue)}" required></label>
      <button type="submit">Browse</button>
    </form>${browsed}
    <p><a href="#/messages?topic=${enc(d.topic)}">Search messages in this topic →</a></p>`;
  },

  async groups() {
    const gs = await api("groups");
    const maxLag = Math.max(0, ...gs.map(g => g.lag));
    return `<h1>Consumer groups <span class="sub">${gs.length}</span></h1>
    <div class="panel">${table([
      ["Group", g => link("groups", g.group)], ["Members", g => num(g.members), "num"], ["Model", g => esc(g.messageModel || "–")],
      ["Broker offset", g => num(g.brokerOffset), "num"], ["Consumer offset", g => num(g.consumerOffset), "num"],
      ["Lag", g => lagCell(g.lag, maxLag), "num"], ["Retry lag", g => num(g.retryMessages), "num"],
      ["Dead letters", g => g.dlqMessages > 0 ? `<a href="#/dlq/${enc(g.group)}">${num(g.dlqMessages)}</a>` : "0", "num"],
    ], gs, "No consumer groups yet.")}</div>`;
  },

  async group(name) {
    const d = await api("groups/" + enc(name));
    const maxLag = Math.max(0, ...d.queues.map(q => q.lag));
    const subs = Object.entries(d.subscriptions || {});
    return `<h1>${esc(d.group)} <span class="sub">${esc(d.messageModel || "no member online")}</span></h1>
    <div class="cards">${card("Lag", d.lag, d.lag > 0)}${card("Members", d.members)}${card("Retry lag", d.retryMessages)}
      ${card("Dead letters", d.dlqMessages, d.dlqMessages > 0)}${card("Consumer offset", d.consumerOffset)}</div>
    <div class="grid2">
      <div class="panel"><h2>Lag trend</h2>${chart(d.lagTrend.map(p => ({ t: p.time, v: p.lag })), "lag trend")}</div>
      <div class="panel"><h2>Members</h2>${table([
        ["Client", m => `<span class="mono">${esc(m.clientId)}</span>`], ["Address", m => `<span class="mono">${esc(m.clientAddr)}</span>`]],
        d.clients, "No member online.")}
        <h2 style="margin-top:14px">Subscriptions</h2>${table([["Topic", s => link("topics", s[0])], ["Expression", s => `<span class="mono">${esc(s[1])}</span>`]], subs, "None.")}
      </div>
    </div>
    <div class="panel"><h2>Lag per queue</h2>${table([
      ["Topic", q => link("topics", q.topic)], ["Broker", q => esc(q.broker)], ["Queue", q => num(q.queueId), "num"],
      ["Broker offset", q => num(q.brokerOffset), "num"], ["Consumer offset", q => num(q.consumerOffset), "num"],
      ["Lag", q => lagCell(q.lag, maxLag), "num"],
      ["Last consumed", q => `<span title="${q.lastTimestamp ? "the last consumed message was stored " + esc(when(q.lastTimestamp)) : ""}">${q.consumedAt ? esc(when(q.consumedAt)) : "–"}</span>`],
      ["Oldest unconsumed", q => q.lag > 0 && q.oldestUnconsumed ? `<span class="behind">${esc(ago(Math.max(0, Date.now() - q.oldestUnconsumed)))} behind</span>` : q.lag > 0 ? "–" : "caught up", "num"],
    ], d.queues, "The group consumes nothing yet.")}
      <p class="muted">Last consumed: when the group's committed offset last moved (the broker's clock; unknown after a broker restart until it moves again). Oldest unconsumed: how long the first message the group has not consumed has been stored.</p></div>
    ${d.dlqMessages > 0 ? `<p><a href="#/dlq/${enc(d.group)}">${num(d.dlqMessages)} dead letters →</a></p>` : ""}`;
  },

  async messages(_, q) {
    const id = q.get("id") || "", topic = q.get("topic") || "", key = q.get("key") || "";
    let results = "";
    if (id || (topic && key)) {
      const qs = id ? `id=${enc(id)}${topic ? "&topic=" + enc(topic) : ""}` : `topic=${enc(topic)}&key=${enc(key)}`;
      try {
        const ms = await api("messages?" + qs);
        results = ms.length ? ms.map(messageView).join("") : `<p class="muted">No message matches.</p>`;
      } catch (e) { results = errorBox(e); }
    }
    return `<h1>Messages</h1>
    <form class="inline panel" onsubmit="return searchMessages(this)">
      <label class="f">Message ID<input name="id" value="${esc(id)}" placeholder="msgId or offset msgId" size="36"></label>
      <label class="f">Topic<input name="topic" value="${esc(topic)}" placeholder="topic"></label>
      <label class="f">Key<input name="key" value="${esc(key)}" placeholder="message key"></label>
      <button type="submit">Search</button>
    </form>${results}`;
  },

  async dlq(group) {
    if (!group) {
      const gs = await api("groups");
      return `<h1>Dead letters</h1><div class="panel">${table([
        ["Group", g => link("dlq", g.group)], ["Dead letters", g => num(g.dlqMessages), "num"]],
        gs.filter(g => g.dlqMessages > 0), "No group has dead letters.")}</div>`;
    }
    const d = await api("dlq/" + enc(group));
    const w = info.write;
    return `<h1>Dead letters of ${esc(group)} <span class="sub">${num(d.total)} stored, ${num(d.pending)} not resent yet</span></h1>
    ${w ? `<p><button onclick="resend('${esc(enc(group))}', null)" ${d.pending ? "" : "disabled"}>Resend all pending</button></p>`
        : `<div class="note">Read-only console: start <code>keel serve --console-write</code> to resend.</div>`}
    <div id="resend-result"></div>
    <div class="panel">${table([
      ["Offset", m => num(m.queueOffset), "num"], ["Message ID", m => `<a class="mono" href="#/messages?id=${enc(m.msgId)}">${esc(m.msgId)}</a>`],
      ["Original topic", m => m.originTopic ? link("topics", m.originTopic) : "–"], ["Retries", m => num(m.reconsumeTimes), "num"],
      ["Stored", m => when(m.storeTime)], ["Keys", m => esc(m.keys || "–")], ["Body", m => `<span class="clip" title="${esc((m.body || "").slice(0, 500))}">${esc((m.body || "(binary)").slice(0, 200))}</span>`],
      ["Resent", m => m.resent ? `<span class="pill ok">yes</span>` : "no"],
      ...(w ? [["", m => `<button class="secondary small" onclick="resend('${esc(enc(group))}', '${esc(m.msgId)}')">Resend</button>`]] : []),
    ], d.messages, "No dead letters.")}</div>`;
  },

  async transactions() {
    const bs = await api("transactions");
    const rows = bs.flatMap(b => b.pending.map(p => Object.assign({ broker: b.broker }, p)));
    const errs = bs.filter(b => b.error).map(b => `<div class="note">${esc(b.broker)}: ${esc(b.error)}</div>`).join("");
    return `<h1>Pending transactions <span class="sub">${num(bs.reduce((n, b) => n + b.total, 0))} undecided half messages</span></h1>${errs}
    <div class="panel">${table([
      ["Broker", p => esc(p.broker)], ["Topic", p => link("topics", p.topic)], ["Queue", p => num(p.queueId), "num"],
      ["Producer group", p => esc(p.producerGroup)], ["Transaction ID", p => `<span class="mono">${esc(p.transactionId)}</span>`],
      ["Half offset", p => num(p.halfOffset), "num"], ["Age", p => ago(p.ageMs), "num"], ["Checks", p => num(p.checks), "num"],
    ], rows, "No transaction is waiting for a decision.")}</div>`;
  },

  // Broker groups and the replication state of each member.
  async replication() {
    const [gs, el] = await Promise.all([api("replication"),
      api("elections").catch(e => ({ controllerMode: true, error: e.message, groups: [] }))]);
    const replicated = gs.filter(g => !g.masterDown && g.members.some(m => m.brokerId === 0 && m.replication));
    const down = gs.filter(g => g.masterDown);
    return `<h1>Replication <span class="sub">${num(replicated.length)} of ${num(gs.length)} broker group${gs.length === 1 ? "" : "s"} replicated` +
      (down.length ? ` · ${num(down.length)} without a master` : "") + `</span></h1>` +
      (gs.length ? gs.map(replicationPanel).join("") : `<div class="panel"><p class="muted">No broker is registered.</p></div>`) +
      (el.controllerMode ? electionsPanel(el) : "");
  },

  // Records isolated because they failed verification (never delivered;
  // consumers continue after them) and each broker's scrubber.
  async corrupt() {
    const bs = await api("corrupt");
    const rows = bs.flatMap(b => b.records.map(r => Object.assign({ broker: b.broker }, r)));
    const errs = bs.filter(b => b.error).map(b => `<div class="note">${esc(b.broker)}: ${esc(b.error)}</div>`).join("");
    const known = r => r.queueId >= 0;
    return `<h1>Corrupt records <span class="sub">${num(rows.length)} isolated: never delivered, consumers continue after them</span></h1>${errs}
    <div class="panel">${table([
      ["Broker", r => esc(r.broker)], ["Topic", r => known(r) ? link("topics", r.topic) : "(unknown)"],
      ["Queue", r => known(r) ? num(r.queueId) : "–", "num"], ["Queue offset", r => known(r) ? num(r.queueOffset) : "–", "num"],
      ["CommitLog offset", r => num(r.commitLogOffset), "num"], ["Size", r => bytes(r.size), "num"],
      ["Found", r => when(r.foundAt)], ["By", r => esc(r.foundBy)], ["Reason", r => `<span class="clip mono" title="${esc(r.reason)}">${esc(r.reason)}</span>`],
    ], rows, "No corrupt record has been isolated.")}</div>
    <div class="panel"><h2>Scrubber</h2>${table([
      ["Broker", b => esc(b.broker)],
      ["Rate", b => b.scrub.bytesPerSecond ? bytes(b.scrub.bytesPerSecond) + "/s" : "off", "num"],
      ["Read", b => bytes(b.scrub.bytes), "num"], ["Passes", b => num(b.scrub.passes), "num"],
      ["Problems", b => num(b.scrub.problems), "num"], ["Read faults", b => num(b.readFaults), "num"],
    ], bs.filter(b => !b.error), "No broker answered.")}
    ${table([["Latest problems", p => `<span class="mono">${esc(p.file)}: offset ${num(p.offset)}: ${esc(p.msg)}</span>`]],
      bs.flatMap(b => b.scrub.recent), "The scrubber found no problem.")}</div>`;
  },

  // AMQP 0-9-1 queues and exchanges (keel amqp queues / exchanges).
  async amqp() {
    const bs = await api("amqp");
    const on = bs.filter(b => b.enabled && !b.error);
    const qs = on.flatMap(b => b.queues.map(q => Object.assign({ broker: b.broker }, q)));
    const xs = on.flatMap(b => b.exchanges.map(x => Object.assign({ broker: b.broker }, x)));
    const errs = bs.filter(b => b.error).map(b => `<div class="note">${esc(b.broker)}: ${esc(b.error)}</div>`).join("") +
      bs.filter(b => !b.enabled && !b.error).map(b => `<div class="note">${esc(b.broker)}: no AMQP listener</div>`).join("");
    const flags = q => [q.durable && "durable", q.exclusive && "exclusive", q.autoDelete && "auto-delete",
      q.messageTtlMs >= 0 && `ttl ${num(q.messageTtlMs)} ms`, q.maxLength >= 0 && `max ${num(q.maxLength)}`,
      q.deliveryLimit >= 0 && `delivery limit ${num(q.deliveryLimit)}`, q.deadLetterExchange && `dlx ${q.deadLetterExchange}`]
      .filter(Boolean).map(esc).join(", ") || "–";
    const cs = on.flatMap(b => (b.connections || []).map(c => Object.assign({ broker: b.broker }, c)));
    return `<h1>AMQP <span class="sub">${count(qs.length, "queue")}, ${count(qs.reduce((n, q) => n + q.ready, 0), "message")} ready, ${count(cs.length, "connection")}</span></h1>${errs}
    <div class="panel fit" id="amqp-queues"><h2>Queues</h2>${table([
      ["Broker", q => esc(q.broker)],
      ["Queue", q => `<span class="clip" title="${esc(q.name)}">${esc(q.name)}</span><br><span class="muted">${esc(q.vhost)} · ${esc(q.type)}</span>`],
      ["Flags", flags, "wrap"],
      ["Ready", q => num(q.ready), "num"], ["Unacked", q => num(q.unacked), "num"], ["Consumers", q => num(q.consumers), "num"],
      ["Oldest unsettled", q => q.oldestUnsettledAgeMs >= 0 ? ago(q.oldestUnsettledAgeMs) : "–", "num"],
      ["Published", q => num(q.published), "num"], ["Delivered", q => num(q.delivered), "num"], ["Acked", q => num(q.acked), "num"],
      ["Dead-lettered / dropped", q => num(q.deadLettered) + " / " + num(q.dropped), "num"],
    ], qs, "No AMQP queue.")}</div>
    <div class="panel" id="amqp-connections"><h2>Connections</h2>${table([
      ["Broker", c => esc(c.broker)], ["Client", c => `<span class="mono">${esc(c.remote)}</span>`], ["User", c => esc(c.user || "–")],
      ["Vhost", c => esc(c.vhost || "–")], ["Channels", c => num(c.channels), "num"], ["Connected", c => esc(when(c.sinceMs)), "num"],
    ], cs, "No AMQP connection.")}</div>
    <div class="panel"><h2>Exchanges</h2>${table([
      ["Broker", x => esc(x.broker)], ["Vhost", x => esc(x.vhost)], ["Exchange", x => esc(x.name)], ["Type", x => esc(x.type)],
      ["Durable", x => x.durable ? "yes" : "no"], ["Auto-delete", x => x.autoDelete ? "yes" : "no"],
      ["Internal", x => x.internal ? "yes" : "no"], ["Bindings", x => num(x.bindings), "num"],
    ], xs, "No AMQP exchange.")}</div>`;
  },

  // Kafka consumer groups and connections (keel kafka groups / describe /
  // connections); a group as kafka-consumer-groups.sh --describe shows it.
  async kafka(group) {
    if (group) {
      const d = await api("kafka/groups/" + enc(group));
      const maxLag = Math.max(0, ...d.rows.map(r => r.lag));
      return `<h1>Kafka group ${esc(d.group)} <span class="sub">${esc(d.state)}</span></h1>
      <div class="cards">${card("Lag", d.lag, d.lag > 0)}${card("Members", d.members)}</div>
      <div class="panel" id="kafka-describe"><h2>Partitions <span class="sub">as kafka-consumer-groups.sh --describe</span></h2>${table([
        ["Topic", r => r.topic ? link("topics", r.topic) : "–"], ["Partition", r => r.partition >= 0 ? num(r.partition) : "–", "num"],
        ["Current offset", r => r.topic && r.currentOffset >= 0 ? num(r.currentOffset) : "–", "num"],
        ["Log end offset", r => r.topic ? num(r.logEndOffset) : "–", "num"],
        ["Lag", r => r.topic && r.currentOffset >= 0 ? lagCell(r.lag, maxLag) : "–", "num"],
        ["Consumer id", r => `<span class="mono clip" title="${esc(r.consumerId || "")}">${esc(r.consumerId || "–")}</span>`],
        ["Host", r => `<span class="mono">${esc(r.host || "–")}</span>`], ["Client id", r => esc(r.clientId || "–")],
      ], d.rows, "The group has no partition and no member.")}</div>
      ${d.rows.some(r => r.topic && r.currentOffset >= 0) ? `<p><a href="#/groups/${enc(d.group)}">Lag per queue and trend →</a></p>` : ""}`;
    }
    const bs = await api("kafka");
    const on = bs.filter(b => b.enabled && !b.error);
    const gs = on.flatMap(b => b.groups.map(g => Object.assign({ broker: b.broker }, g)));
    const cs = on.flatMap(b => b.connections.map(c => Object.assign({ broker: b.broker }, c)));
    const errs = bs.filter(b => b.error).map(b => `<div class="note">${esc(b.broker)}: ${esc(b.error)}</div>`).join("") +
      bs.filter(b => !b.enabled && !b.error).map(b => `<div class="note">${esc(b.broker)}: no Kafka listener</div>`).join("");
    const assigned = m => m.assignment.map(a => `${esc(a.topic)} [${a.partitions.join(", ")}]`).join("; ") || "–";
    return `<h1>Kafka <span class="sub">${count(gs.length, "consumer group")}, ${count(cs.length, "connection")}</span></h1>${errs}
    <div class="panel" id="kafka-groups"><h2>Consumer groups</h2>${table([
      ["Broker", g => esc(g.broker)], ["Group", g => `<a href="#/kafka/${enc(g.group)}">${esc(g.group)}</a>`], ["State", g => esc(g.state)],
      ["Assignor", g => esc(g.protocol || "–")], ["Generation", g => num(g.generation), "num"], ["Members", g => num(g.members.length), "num"],
    ], gs, "No Kafka consumer group has joined since the broker started.")}</div>
    <div class="panel" id="kafka-members"><h2>Members</h2>${table([
      ["Group", m => esc(m.group)], ["Consumer id", m => `<span class="mono">${esc(m.memberId)}</span>`],
      ["Host", m => `<span class="mono">${esc(m.host)}</span>`], ["Client id", m => esc(m.clientId)], ["Assigned partitions", assigned, "wrap"],
    ], gs.flatMap(g => g.members.map(m => Object.assign({ group: g.group }, m))), "No member online.")}</div>
    <div class="panel" id="kafka-connections"><h2>Connections</h2>${table([
      ["Broker", c => esc(c.broker)], ["Client", c => `<span class="mono">${esc(c.remote)}</span>`], ["Client id", c => esc(c.clientId || "–")],
      ["User", c => esc(c.user || "–")], ["Requests", c => num(c.requests), "num"], ["Connected", c => esc(when(c.sinceMs)), "num"],
    ], cs, "No Kafka connection.")}</div>`;
  },
};

// replicationPanel shows one broker group: each member's own state and,
// for a slave, what the master says of it.
function replicationPanel(g) {
  const master = g.members.find(m => m.brokerId === 0);
  const ms = master && master.replication;
  const down = g.masterDown;
  let summary = "not replicated";
  if (down) {
    summary = "no master: the master is " + (down.registered ? "not answering" : "not registered with the NameServers") +
      ", unreachable " + sinceText(down.lastHeard) + "; no sends to this group, its slaves serve reads";
  } else if (ms) {
    summary = `${ms.role}, ${num(ms.inSyncReplicas)} of ${num(1 + (ms.replicas || []).length)} copies in sync` +
      (ms.role === "SYNC_MASTER" ? `, minInSyncReplicas ${num(ms.minInSyncReplicas)}` : "");
  }
  const short = ms && ms.role === "SYNC_MASTER" && ms.inSyncReplicas < ms.minInSyncReplicas;
  const missing = down && !down.registered ? [{ brokerId: 0, addr: down.address ? down.address + " (replication; not registered)" : "(not registered)", missing: true }] : [];
  const rows = missing.concat(g.members, (g.unregistered || []).map(r => ({ brokerId: r.brokerId, addr: r.address, unregistered: true, asReplica: r })));
  const lag = r => r.lagSeconds < 0 ? "–" : (r.lagSeconds < 1 ? Math.round(r.lagSeconds * 1000) + " ms" : r.lagSeconds.toFixed(1) + " s");
  const inSync = m => {
    if (m.brokerId === 0 || !ms) return "–";
    if (!m.asReplica) return `<span class="pill dlq">not connected</span>`;
    return m.asReplica.inSync ? `<span class="pill ok">in sync</span>` : `<span class="pill dlq">not in sync</span>`;
  };
  const link = m => {
    const s = m.replication;
    if (m.missing) return `<span class="pill dlq">unreachable ${esc(sinceText(down.lastHeard))}</span>`;
    if (m.error) return `<span class="pill dlq">${esc(m.error)}</span>`;
    if (m.unregistered) return "connected, not registered";
    if (!s || s.role !== "SLAVE") return "–";
    return (s.connected ? "following " + esc(s.masterAddress) : `<span class="pill dlq">not following its master</span>`) +
      (s.lastContact ? ` <span class="muted">(heard ${esc(ago(Date.now() - new Date(s.lastContact)))} ago)</span>` : "");
  };
  return `<div class="panel replication-group"><h2>${esc(g.brokerName)} <span class="sub">cluster ${esc(g.cluster)} · ${esc(summary)}</span>` +
    (short ? ` <span class="pill dlq">too few in sync: sends are refused</span>` : "") +
    (down ? ` <span class="pill dlq">no master</span>` : "") + `</h2>${table([
      ["Id", m => m.brokerId === 0 ? "0 (master)" : esc(m.brokerId)],
      ["Role", m => esc(m.replication ? m.replication.role : (m.unregistered ? "replica" : (m.missing ? "master" : "–")))],
      ["Address", m => `<span class="mono">${esc(m.addr)}</span>`],
      ["Epoch", m => m.replication ? num(m.replication.epoch) : "–", "num"],
      ["Log end", m => m.replication ? num(m.replication.writtenOffset) : "–", "num"],
      ["Confirmed", m => m.replication ? num(m.replication.confirmedOffset) : "–", "num"],
      ["In sync", inSync],
      ["Lag", m => m.asReplica ? bytes(m.asReplica.lagBytes) : "–", "num"],
      ["Lag (time)", m => m.asReplica ? lag(m.asReplica) : "–", "num"],
      ["Last ack", m => m.asReplica && m.asReplica.lastAck ? esc(ago(Date.now() - new Date(m.asReplica.lastAck))) + " ago" : "–"],
      ["Link", link],
    ], rows)}</div>`;
}

// electionsPanel shows each group's election history as the controllers
// hold it (controller mode), newest first.
function electionsPanel(el) {
  const master = id => id ? "replica " + num(id) : "–";
  const kind = k => `<span class="pill ${k === "unclean" ? "dlq" : "ok"}">${esc(k)}</span>`;
  const groups = (el.groups || []).map(g => `<h3>${esc(g.group)} <span class="sub">master ${esc(master(g.masterId))} at epoch ${num(g.masterEpoch)}</span></h3>` +
    table([
      ["Time", e => when(e.time)], ["Epoch", e => num(e.epoch), "num"],
      ["Old master", e => esc(master(e.oldMasterId))], ["New master", e => esc(master(e.masterId))],
      ["Kind", e => kind(e.kind)], ["Note", e => e.note ? `<span class="clip" title="${esc(e.note)}">${esc(e.note)}</span>` : ""],
    ], (g.elections || []).slice().reverse(), "No election yet.")).join("");
  return `<div class="panel"><h2>Elections <span class="sub">from the controllers: the last 32 per group, newest first</span></h2>` +
    (el.error ? errorBox(el.error) : "") + (groups || `<p class="muted">The controllers hold no group.</p>`) + `</div>`;
}

// sinceText says since when a master has been unreachable (its slaves'
// last contact with it).
function sinceText(lastHeard) {
  if (!lastHeard) return "(no slave heard it since it started)";
  return `since ${new Date(lastHeard).toLocaleString()} (${ago(Date.now() - new Date(lastHeard))} ago, its slaves' last contact)`;
}

function card(label, value, bad, note) {
  return `<div class="card"><div class="label">${esc(label)}</div><div class="value ${bad ? "bad" : ""}">${num(value)}</div>` +
    (note ? `<div class="note-s">${esc(note)}</div>` : "") + `</div>`;
}
// kindsNote counts the topics that are not user topics, by kind (the
// keel_topics{kind} rule).
function kindsNote(k) {
  k = k || {};
  return `${num(k.retry || 0)} retry · ${num(k.dlq || 0)} dead-letter · ${num(k.system || 0)} system`;
}
// latencyPanel shows each broker's recent send and flush latency (p50/p99
// over the last few minutes, from its metrics histograms).
function latencyPanel(brokers) {
  const rows = brokers.filter(b => b.info && b.info.keelSendCount !== undefined);
  if (!rows.length) return "";
  const ms = v => v === undefined ? "–" : Number(v).toFixed(Number(v) < 10 ? 2 : 1) + " ms";
  const q = (n, p) => Number(n) > 0 ? ms(p) : "–";
  const win = Math.max(...rows.map(b => Number(b.info.keelLatencyWindowSeconds) || 0));
  return `<div class="panel" id="latency"><h2>Latency <span class="sub">last ${esc(ago(win * 1000))}, estimated from the metrics histograms</span></h2>${table([
    ["Broker", b => memberName(b, rows)],
    ["Send p50", b => q(b.info.keelSendCount, b.info.keelSendLatencyP50Ms), "num"],
    ["Send p99", b => q(b.info.keelSendCount, b.info.keelSendLatencyP99Ms), "num"],
    ["Sends", b => num(Number(b.info.keelSendCount)), "num"],
    ["Flush p50", b => q(b.info.keelFlushCount, b.info.keelFlushLatencyP50Ms), "num"],
    ["Flush p99", b => q(b.info.keelFlushCount, b.info.keelFlushLatencyP99Ms), "num"],
    ["Flushes", b => num(Number(b.info.keelFlushCount)), "num"],
  ], rows)}</div>`;
}
// memberName names a broker with its role in its group ("broker-a" alone,
// "broker-a master" and "broker-a slave 1" when its group has several).
function memberName(b, all) {
  const group = all.filter(o => o.brokerName === b.brokerName && o.cluster === b.cluster);
  if (group.length < 2) return esc(b.brokerName);
  return `${esc(b.brokerName)} <span class="muted">${b.brokerId === 0 ? "master" : "slave " + esc(b.brokerId)}</span>`;
}
function readQ(t) { return t.brokers.reduce((n, b) => n + b.readQueueNums, 0); }
function writeQ(t) { return t.brokers.reduce((n, b) => n + b.writeQueueNums, 0); }

function diskPanel(l) {
  const used = l.diskTotalBytes ? 1 - l.diskFreeBytes / l.diskTotalBytes : 0;
  const cls = used > 0.9 ? "bad" : used > 0.75 ? "warn" : "";
  return `<div class="panel"><h2>Disk (this broker)</h2>
    <div class="gauge ${cls}"><span style="width:${(used * 100).toFixed(1)}%"></span></div>
    <span class="muted">${(used * 100).toFixed(1)}% used of ${bytes(l.diskTotalBytes)} · CommitLog ${bytes(l.commitLogBytes)} ·
    store ${l.writable ? `<span class="pill ok">writable</span>` : `<span class="pill dlq">not writable</span>`}</span></div>`;
}

function createTopicForm() {
  return `<form class="inline panel" onsubmit="return createTopic(this)">
    <label class="f">New topic<input name="topic" required pattern="[%|a-zA-Z0-9_-]+" placeholder="name"></label>
    <label class="f">Queues<input name="queues" type="number" min="1" max="1024" value="4"></label>
    <label class="f">Permission<select name="perm"><option value="rw">read/write</option><option value="r">read</option><option value="w">write</option></select></label>
    <button type="submit">Create topic</button><span id="create-result"></span></form>`;
}

function messageView(m) {
  const props = Object.entries(m.properties || {}).sort();
  const text = m.body != null && m.body !== "" ? m.body : null;
  const id = "b" + Math.random().toString(36).slice(2);
  return `<div class="panel message"><h2>${esc(m.topic)} · queue ${num(m.queueId)} · offset ${num(m.queueOffset)}</h2>
  <div class="grid2"><dl class="kv">
    <dt>Message ID</dt><dd>${esc(m.msgId)}</dd><dt>Offset msgId</dt><dd>${esc(m.offsetMsgId)}</dd>
    <dt>Tags</dt><dd>${esc(m.tags || "–")}</dd><dt>Keys</dt><dd>${esc(m.keys || "–")}</dd>
    <dt>Born</dt><dd>${esc(when(m.bornTime))} from ${esc(m.bornHost)}</dd><dt>Stored</dt><dd>${esc(when(m.storeTime))} on ${esc(m.storeHost)}</dd>
    <dt>Reconsumed</dt><dd>${num(m.reconsumeTimes)}</dd><dt>Body</dt><dd>${num(m.bodyBytes)} bytes</dd></dl>
    <div>${table([["Property", p => `<span class="mono">${esc(p[0])}</span>`], ["Value", p => `<span class="mono">${esc(p[1])}</span>`]], props, "No properties.")}</div></div>
  <div style="margin-top:10px"><span class="tabs"><button class="${text != null ? "on" : ""}" onclick="showBody('${id}','text')">Text</button><button class="${text == null ? "on" : ""}" onclick="showBody('${id}','hex')">Hex</button></span>
  <pre class="body" id="${id}" data-text="${esc(text ?? "")}" data-b64="${esc(m.bodyBase64 || "")}">${esc(text != null ? text : hexDump(bodyBytes(m)))}</pre></div></div>`;
}

function bodyBytes(m) {
  if (m.bodyBase64) return Uint8Array.from(atob(m.bodyBase64), c => c.charCodeAt(0));
  return new TextEncoder().encode(m.body || "");
}
function hexDump(b) {
  let out = "";
  for (let i = 0; i < b.length; i += 16) {
    const row = Array.from(b.slice(i, i + 16));
    out += i.toString(16).padStart(8, "0") + "  " + row.map(x => x.toString(16).padStart(2, "0")).join(" ").padEnd(48) +
      "  |" + row.map(x => x >= 32 && x < 127 ? String.fromCharCode(x) : ".").join("") + "|\n";
  }
  return out || "(empty)";
}

// ---- actions (called from the page) -------------------------------------

window.showBody = function (id, mode) {
  const pre = document.getElementById(id);
  const m = { body: pre.dataset.text, bodyBase64: pre.dataset.b64 };
  pre.textContent = mode === "hex" ? hexDump(bodyBytes(m)) : (m.bodyBase64 ? "(binary body: see Hex)" : m.body);
  pre.previousElementSibling.querySelectorAll("button").forEach(b => b.classList.toggle("on", b.textContent.toLowerCase() === mode));
};
window.filterRows = function (text) {
  text = text.toLowerCase();
  document.querySelectorAll("main tbody tr").forEach(tr => { tr.style.display = tr.textContent.toLowerCase().includes(text) ? "" : "none"; });
};
// localInput formats Unix ms for a datetime-local input (local time).
function localInput(ms) {
  const d = new Date(ms), p = n => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}
window.browseTopic = function (f, topic) {
  const ms = new Date(f.from.value).getTime();
  if (!isNaN(ms)) location.hash = `#/topics/${topic}?from=${ms}`;
  return false;
};
window.searchMessages = function (f) {
  const p = new URLSearchParams();
  for (const k of ["id", "topic", "key"]) if (f[k].value.trim()) p.set(k, f[k].value.trim());
  location.hash = "#/messages?" + p.toString();
  return false;
};
window.createTopic = function (f) {
  const out = document.getElementById("create-result");
  post("topics", { topic: f.topic.value.trim(), queues: Number(f.queues.value), perm: f.perm.value })
    .then(t => { location.hash = "#/topics/" + enc(t.topic); })
    .catch(e => { out.innerHTML = errorBox(e); });
  return false;
};
window.resend = function (group, msgId, again) {
  const out = document.getElementById("resend-result");
  const what = msgId ? "message " + msgId : "every pending dead letter";
  if (!confirm((again ? "Resend again " : "Resend ") + what + " of " + decodeURIComponent(group) + " to its original topic?")) return;
  post("dlq/" + group + "/resend", msgId ? { msgId, again: !!again } : { all: true })
    .then(rs => { out.innerHTML = `<div class="note">Resent ${rs.length} message(s).</div>`; setTimeout(route, 800); })
    .catch(e => {
      // A dead letter resent before: say so and offer to resend it again.
      out.innerHTML = errorBox(e) + (e.again && msgId ? `<p><button class="secondary small" id="resend-again" onclick="resend('${esc(group)}', '${esc(msgId)}', true)">Resend again</button></p>` : "");
    });
};

// ---- router -------------------------------------------------------------

// pageTitle names a page for its heading and the browser tab.
function pageTitle(page, arg) {
  const titles = {
    overview: () => "Overview", topics: () => "Topics", topic: a => "Topic " + a,
    groups: () => "Consumer groups", group: a => "Consumer group " + a, messages: () => "Messages",
    dlq: a => a ? "Dead letters of " + a : "Dead letters", transactions: () => "Pending transactions", corrupt: () => "Corrupt records",
    replication: () => "Replication",
    amqp: () => "AMQP", kafka: a => a ? "Kafka group " + a : "Kafka",
  };
  return (titles[page] || titles.overview)(arg);
}

// slaveReadsNote says which broker groups the page was read from a slave
// of, and why.
function slaveReadsNote() {
  return [...slaveReads].map(l => `<div class="note" role="status">${esc(l)}</div>`).join("");
}

// errorPage shows a failed page under its own title; a missing topic or
// group says so in words and links to the list.
function errorPage(page, arg, e) {
  const lists = { topic: ["topics", "All topics"], group: ["groups", "All consumer groups"], dlq: ["dlq", "Dead letters"] };
  if (e.status === 404 && lists[page]) {
    const [href, text] = lists[page];
    return `<h1>${esc(pageTitle(page, arg))} <span class="sub">not found</span></h1>` + errorBox(e) +
      `<p><a href="#/${href}">${esc(text)} →</a></p>`;
  }
  return `<h1>${esc(pageTitle(page, arg))}</h1>` + errorBox(e);
}

async function route() {
  clearTimeout(refreshTimer);
  const [path, query] = (location.hash.slice(1) || "/overview").split("?");
  const parts = path.split("/").filter(Boolean);
  let page = parts[0] || "overview";
  const arg = parts.length > 1 ? decodeURIComponent(parts.slice(1).join("/")) : "";
  if (page === "topics" && arg) page = "topic";
  if (page === "groups" && arg) page = "group";
  const render = pages[page] || pages.overview;
  document.querySelectorAll("#nav a").forEach(a => a.classList.toggle("active", a.dataset.page === (parts[0] || "overview")));
  const q = new URLSearchParams(query || "");
  slaveReads = new Set();
  try {
    const html = await render(arg, q);
    const focus = document.activeElement && document.activeElement.id;
    app.innerHTML = slaveReadsNote() + html;
    if (focus === "filter") document.getElementById("filter").focus();
    app.dataset.page = page;
    stamp();
  } catch (e) {
    app.innerHTML = slaveReadsNote() + errorPage(page, arg, e);
    app.dataset.page = page;
  }
  document.title = pageTitle(page, arg) + " · Keel console";
  if (["overview", "groups", "group", "topic", "transactions", "corrupt", "replication", "amqp", "kafka"].includes(page)) {
    refreshTimer = setTimeout(refresh, 10000);
  }
}

// refresh re-renders the page, but not under a person filling in a form.
function refresh() {
  const a = document.activeElement;
  if (a && a.closest && a.closest("form") && a.id !== "filter") {
    refreshTimer = setTimeout(refresh, 10000);
    return;
  }
  route();
}

async function start() {
  try { info = await api("info"); } catch (e) { /* shown by the page */ }
  const mode = document.getElementById("mode");
  mode.textContent = info.write ? "write access" : "read-only";
  mode.classList.toggle("write", !!info.write);
  document.getElementById("version").textContent = "Keel " + (info.version || "");
  window.addEventListener("hashchange", route);
  route();
}
start();
