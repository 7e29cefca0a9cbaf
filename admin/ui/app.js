// tollgated's dashboard: reads this node's admin API and /metrics with the
// admin token the operator signs in with, and redraws every REFRESH_MS.
// Plain script, no build step; it writes data into the page only as text.
//
// What it shows and offers follows the token's role (GET /v1/whoami): a
// section or button needing a permission the role lacks is not there, so
// nothing on the page fails for want of one. Signing out, or any 401 (a
// revoked token), empties every table, chart and figure, and an answer
// still on its way from before is dropped, not drawn.
'use strict';

const TOKEN_KEY = 'tollgated.admin-token';
const REFRESH_MS = 2000;
const HISTORY = 150;         // samples kept: five minutes at REFRESH_MS
const LATENCY_WINDOW = 60e3; // percentiles over the last minute
const AUDIT_ROWS = 100;      // audit records shown, newest first
const MAX_PAGES = 20;        // pages one list may take per refresh
const COLORS = ['#1f6feb', '#c62828', '#ef6c00', '#6a1b9a', '#2e7d32', '#00838f'];

const $ = (id) => document.getElementById(id);

let samples = [];      // parsed /metrics scrapes, oldest first
let auditCursor = null; // where the audit log continues
let auditRows = [];    // newest first
let timer = null;
let perms = new Set(); // what the signed-in token's role may do
let session = 0;       // bumped at every sign-in and sign-out: older answers are dropped

class Unauthorized extends Error {}
class Stale extends Error {} // an answer for a session that has ended

const may = (p) => perms.has(p);

// api calls the admin API with the token; a problem answer becomes an
// Error carrying its status, code and detail. An answer that arrives after
// the session it was asked for ended is thrown away (Stale).
async function api(path, method = 'GET', body = undefined) {
  const asked = session;
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { Authorization: 'Bearer ' + token };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, {
    method, headers, cache: 'no-store', redirect: 'error',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (asked !== session) throw new Stale();
  if (resp.status === 401) throw new Unauthorized();
  if (!resp.ok) {
    let msg = 'HTTP ' + resp.status;
    try {
      const p = await resp.json();
      msg = `${p.status} ${p.code}: ${p.detail || p.title}`;
    } catch (_) { /* not a problem document */ }
    throw new Error(path + ': ' + msg);
  }
  return resp;
}

async function getJSON(path) {
  const asked = session;
  const v = await (await api(path)).json();
  if (asked !== session) throw new Stale();
  return v;
}

// listAll follows a list's next_cursor, at most MAX_PAGES pages.
async function listAll(path) {
  const sep = path.includes('?') ? '&' : '?';
  let items = [];
  let cursor = null;
  for (let i = 0; i < MAX_PAGES; i++) {
    const page = await getJSON(path + sep + 'limit=1000' + (cursor ? '&cursor=' + encodeURIComponent(cursor) : ''));
    items = items.concat(page.items);
    cursor = page.next_cursor;
    if (!cursor) break;
  }
  return items;
}

// parseMetrics reads the Prometheus text exposition into samples.
function parseMetrics(text) {
  const out = [];
  const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
  const label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  for (const l of text.split('\n')) {
    if (l === '' || l[0] === '#') continue;
    const m = line.exec(l);
    if (!m) continue;
    const labels = {};
    for (const lm of (m[2] || '').matchAll(label)) labels[lm[1]] = lm[2].replace(/\\(.)/g, '$1');
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

// sampleOf keeps what the dashboard draws from one scrape.
function sampleOf(metrics, t) {
  const s = { t, requests: {}, admitted: 0, denials: {}, conns: {}, inFlight: {}, latency: {} };
  for (const m of metrics) {
    switch (m.name) {
      case 'tollgated_http_requests_total': s.requests[m.labels.shard] = m.value; break;
      case 'tollgated_admitted_total': s.admitted += m.value; break;
      case 'tollgated_denials_total': s.denials[m.labels.reason] = m.value; break;
      case 'tollgated_http_connections': s.conns[m.labels.shard] = m.value; break;
      case 'tollgated_reservations_in_flight': s.inFlight[m.labels.shard] = m.value; break;
      case 'tollgated_request_duration_seconds_bucket': {
        const r = (s.latency[m.labels.route] ||= {});
        r[m.labels.le === '+Inf' ? Infinity : Number(m.labels.le)] = m.value;
        break;
      }
    }
  }
  return s;
}

// historySample turns a sample of the node's history (GET
// /v1/metrics/history) into the shape sampleOf makes, on this browser's
// clock (skew: this clock less the node's).
function historySample(h, skew) {
  const latency = {};
  for (const [route, buckets] of Object.entries(h.latency || {})) {
    const r = (latency[route] = {});
    for (const [le, n] of Object.entries(buckets)) r[le === '+Inf' ? Infinity : Number(le)] = n;
  }
  return {
    t: h.t + skew, requests: h.requests || {}, admitted: h.admitted || 0, denials: h.denials || {},
    conns: h.connections || {}, inFlight: h.in_flight || {}, latency,
  };
}

// seedHistory starts the charts from the node's last minutes: a new tab
// shows the recent past at once.
async function seedHistory() {
  const before = Date.now();
  const h = await getJSON('/v1/metrics/history');
  const skew = Math.round((before + Date.now()) / 2) - h.now_ms;
  samples = h.samples.map((s) => historySample(s, skew)).slice(-HISTORY);
  document.body.dataset.history = String(samples.length);
}

const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0);

// rate is the per-second increase of f between two samples.
function rate(a, b, f) {
  const dt = (b.t - a.t) / 1000;
  return dt > 0 ? Math.max(f(b) - f(a), 0) / dt : 0;
}

// quantile estimates the q-quantile of cumulative bucket counts (by upper
// bound), interpolating inside the bucket, as histogram_quantile does.
function quantile(q, cum) {
  const bounds = Object.keys(cum).map(Number).sort((a, b) => a - b);
  const total = cum[Infinity] || 0;
  if (total === 0) return null;
  const rank = q * total;
  let lower = 0, below = 0;
  for (const le of bounds) {
    const n = cum[le];
    if (n >= rank) {
      if (le === Infinity) return lower;
      if (n === below) return le;
      return lower + (le - lower) * (rank - below) / (n - below);
    }
    lower = le; below = n;
  }
  return lower;
}

function fmtNumber(n) {
  if (n === null || n === undefined) return '–';
  return Number(n).toLocaleString('en-US', { maximumFractionDigits: 1 });
}

function fmtSeconds(s) {
  if (s === null) return '–';
  if (s < 1e-3) return (s * 1e6).toFixed(0) + ' µs';
  if (s < 1) return (s * 1e3).toFixed(2) + ' ms';
  return s.toFixed(2) + ' s';
}

function fmtTime(iso) {
  if (!iso) return '–';
  return iso.replace('T', ' ').replace(/\.\d+/, '').replace('Z', ' UTC');
}

// fill replaces tbody's rows: each row is a list of cells, a cell text or
// a Node; attrs set data attributes on the row.
function fill(tbody, rows) {
  tbody.replaceChildren(...rows.map(({ cells, attrs = {} }) => {
    const tr = document.createElement('tr');
    for (const [k, v] of Object.entries(attrs)) tr.dataset[k] = v;
    for (const c of cells) {
      const td = document.createElement('td');
      if (c instanceof Node) td.append(c); else td.textContent = c;
      tr.append(td);
    }
    return tr;
  }));
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function meter(fraction) {
  const m = el('span', 'meter' + (fraction > 1 ? ' over' : ''));
  const bar = el('span');
  bar.style.width = Math.min(100, Math.round(fraction * 100)) + '%';
  m.append(bar);
  return m;
}

// chart draws series (each {label, values}) as lines over the samples.
function chart(canvas, series) {
  const ctx = canvas.getContext('2d');
  const w = canvas.width, h = canvas.height, pad = 18;
  ctx.clearRect(0, 0, w, h);
  const max = Math.max(1, ...series.flatMap((s) => s.values));
  ctx.font = '11px system-ui, sans-serif';
  ctx.fillStyle = '#66707a';
  ctx.fillText(fmtNumber(max) + '/s', 2, 11);
  series.forEach((s, i) => {
    ctx.strokeStyle = COLORS[i % COLORS.length];
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    s.values.forEach((v, j) => {
      const x = pad + (w - 2 * pad) * (s.values.length < 2 ? 1 : j / (s.values.length - 1));
      const y = h - pad - (h - 2 * pad) * (v / max);
      if (j === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
    ctx.fillStyle = ctx.strokeStyle;
    if (s.values.length === 1) { // one interval so far: a dot, not a line
      ctx.beginPath();
      ctx.arc(w - pad, h - pad - (h - 2 * pad) * (s.values[0] / max), 2.5, 0, 2 * Math.PI);
      ctx.fill();
    }
    ctx.fillText(s.label, pad + i * 150, h - 3);
  });
}

// perSecond is the series of f's rate between consecutive samples.
function perSecond(f) {
  const out = [];
  for (let i = 1; i < samples.length; i++) out.push(rate(samples[i - 1], samples[i], f));
  return out;
}

function renderTraffic() {
  if (samples.length < 2) return;
  const [a, b] = samples.slice(-2);
  $('rps').textContent = fmtNumber(rate(a, b, (s) => sum(s.requests)));
  $('admitted').textContent = fmtNumber(rate(a, b, (s) => s.admitted));
  $('denied').textContent = fmtNumber(rate(a, b, (s) => sum(s.denials)));
  chart($('rps-chart'), [
    { label: 'requests/s', values: perSecond((s) => sum(s.requests)) },
    { label: 'denied/s', values: perSecond((s) => sum(s.denials)) },
  ]);
}

function renderDenials() {
  if (samples.length < 2) return;
  const [a, b] = samples.slice(-2);
  const reasons = Object.keys(b.denials).filter((r) => b.denials[r] > 0)
    .sort((x, y) => b.denials[y] - b.denials[x]);
  fill($('denials'), reasons.map((r) => ({
    attrs: { reason: r },
    cells: [r, fmtNumber(rate(a, b, (s) => s.denials[r] || 0)), fmtNumber(b.denials[r])],
  })));
  chart($('denials-chart'), reasons.slice(0, COLORS.length).map((r) => ({
    label: r, values: perSecond((s) => s.denials[r] || 0),
  })));
}

function renderLatency() {
  if (samples.length < 2) return;
  const b = samples[samples.length - 1];
  const a = samples.find((s) => b.t - s.t <= LATENCY_WINDOW) || samples[0];
  const rows = [];
  for (const route of Object.keys(b.latency).sort()) {
    const delta = {};
    for (const [le, n] of Object.entries(b.latency[route])) {
      const bound = le === 'Infinity' ? Infinity : Number(le);
      delta[bound] = Math.max(n - ((a.latency[route] || {})[bound] || 0), 0);
    }
    if (!delta[Infinity]) continue;
    rows.push({
      attrs: { route },
      cells: [route, fmtNumber(delta[Infinity] / ((b.t - a.t) / 1000)),
        fmtSeconds(quantile(0.5, delta)), fmtSeconds(quantile(0.9, delta)), fmtSeconds(quantile(0.99, delta))],
    });
  }
  fill($('latency'), rows);
}

function renderShards() {
  if (samples.length < 2) return;
  const [a, b] = samples.slice(-2);
  const shards = Object.keys(b.requests).sort((x, y) => x - y);
  const rates = shards.map((sh) => rate(a, b, (s) => s.requests[sh] || 0));
  const top = Math.max(1, ...rates);
  fill($('shards'), shards.map((sh, i) => {
    const bar = el('span', 'bar');
    bar.style.width = Math.round(120 * rates[i] / top) + 'px';
    return { attrs: { shard: sh }, cells: [sh, fmtNumber(rates[i]), bar, fmtNumber(b.conns[sh]), fmtNumber(b.inFlight[sh])] };
  }));
}

// renderAccounts draws the account tree: each account under its parent,
// with spend against its budget and where its money is.
function renderAccounts(accounts) {
  const acting = may('account.status');
  const kids = {};
  const roots = [];
  const byId = {};
  for (const a of accounts) {
    byId[a.id] = a;
    if (a.parent) (kids[a.parent] ||= []).push(a.id); else roots.push(a.id);
  }
  const rows = [];
  const walk = (id, depth) => {
    const a = byId[id];
    const name = el('span', 'tree', '  '.repeat(depth) + (depth ? '└ ' : '') + a.id + ' (' + a.scope + ')');
    const spent = el('span');
    if (a.budget && a.budget.allowance > 0) {
      // Units this node's leases hold unspent go back to the allowance:
      // not spent (tollgatectl's spendAgainstBudget says the same).
      const held = a.funds.held_unspent || 0;
      const used = Math.min(Math.max(a.budget.allowance - a.funds.allowance_left - held, 0), a.budget.allowance);
      spent.append(meter(used / a.budget.allowance), fmtNumber(used) + ' / ' + fmtNumber(a.budget.allowance) + ' per ' + a.budget.period);
    } else {
      spent.textContent = '–';
    }
    const cells = [name, el('span', 'status-' + a.status, a.status), spent, fmtTime(a.period_end),
      fmtNumber(a.funds.can_spend), fmtNumber(a.funds.in_leases), fmtNumber(a.funds.spent), fmtNumber(a.funds.owed)];
    if (acting) cells.push(statusAction(a));
    rows.push({ attrs: { account: a.id }, cells });
    for (const k of (kids[id] || []).sort()) walk(k, depth + 1);
  };
  for (const r of roots.sort()) walk(r, 0);
  fill($('accounts'), rows);
}

// statusAction is the button that suspends an active account or resumes a
// suspended one (closing, which is final, is left to the API); only for a
// role with account.status.
function statusAction(a) {
  const span = el('span', 'actions');
  const to = { active: 'suspended', suspended: 'active' }[a.status];
  if (!to) return span;
  const b = el('button', '', to === 'suspended' ? 'Suspend' : 'Resume');
  b.dataset.action = to;
  b.addEventListener('click', async () => {
    b.disabled = true;
    try {
      await api('/v1/accounts/' + encodeURIComponent(a.id) + '/status', 'POST', { status: to });
      refresh();
    } catch (e) {
      failed(e);
    }
  });
  span.append(b);
  return span;
}

function renderLeases(leases) {
  fill($('leases'), leases.slice(0, 200).map((l) => ({
    attrs: { lease: l.id },
    cells: [String(l.id), l.account, fmtNumber(l.granted), fmtNumber(l.used), fmtTime(l.expires_at)],
  })));
}

// refreshAudit reads the audit records added since the last refresh.
async function refreshAudit() {
  for (let i = 0; i < MAX_PAGES; i++) {
    const page = await getJSON('/v1/audit?limit=1000' + (auditCursor ? '&cursor=' + encodeURIComponent(auditCursor) : ''));
    if (page.items.length === 0) break;
    auditCursor = page.next_cursor;
    auditRows = page.items.reverse().concat(auditRows).slice(0, AUDIT_ROWS);
  }
  fill($('audit'), auditRows.map((r) => ({
    attrs: { action: r.action },
    cells: [String(r.seq), fmtTime(r.at), r.actor, r.action, r.target],
  })));
}

async function refresh() {
  clearTimeout(timer);
  const asked = session;
  try {
    const reads = may('read');
    const [metricsText, accounts, leases] = await Promise.all([
      api('/metrics').then((r) => r.text()),
      reads ? listAll('/v1/accounts') : [],
      reads ? listAll('/v1/leases?active=true') : [],
      reads ? refreshAudit() : null,
    ]);
    if (asked !== session) return;
    samples.push(sampleOf(parseMetrics(metricsText), Date.now()));
    if (samples.length > HISTORY) samples = samples.slice(-HISTORY);
    renderTraffic();
    renderDenials();
    renderLatency();
    renderShards();
    if (reads) {
      renderAccounts(accounts);
      renderLeases(leases);
    }
    $('status').textContent = 'updated ' + new Date().toLocaleTimeString();
    document.body.dataset.refreshed = String(samples.length);
  } catch (e) {
    if (!failed(e)) return;
  }
  if (asked === session) timer = setTimeout(refresh, REFRESH_MS);
}

// failed handles an error of a call: a 401 signs out (the token was
// revoked, or never was), a stale answer is ignored; anything else is shown.
// It reports whether the dashboard goes on.
function failed(e) {
  if (e instanceof Stale) return false;
  if (e instanceof Unauthorized) {
    signOut('The admin token was refused (401): sign in again.');
    return false;
  }
  $('status').textContent = String(e.message || e);
  return true;
}

// applyRole shows what the token's role may use and nothing else.
function applyRole(who) {
  perms = new Set(who.permissions);
  for (const e of document.querySelectorAll('[data-needs]')) e.hidden = !may(e.dataset.needs);
  $('whoami').textContent = who.name + ' (' + who.role + ')';
  $('whoami').hidden = false;
  document.body.dataset.role = who.role;
}

async function showDashboard() {
  const asked = ++session;
  try {
    applyRole(await getJSON('/v1/whoami'));
    await seedHistory();
  } catch (e) {
    if (!failed(e)) return;
  }
  if (asked !== session) return;
  $('login').hidden = true;
  $('dashboard').hidden = false;
  $('signout').hidden = false;
  refresh();
}

// clearAll empties every table, chart and figure the dashboard drew.
function clearAll() {
  samples = [];
  auditCursor = null;
  auditRows = [];
  perms = new Set();
  for (const tbody of document.querySelectorAll('#dashboard tbody')) tbody.replaceChildren();
  for (const c of document.querySelectorAll('#dashboard canvas')) c.getContext('2d').clearRect(0, 0, c.width, c.height);
  for (const id of ['rps', 'admitted', 'denied']) $(id).textContent = '–';
  $('whoami').textContent = '';
  $('whoami').hidden = true;
  delete document.body.dataset.refreshed;
  delete document.body.dataset.history;
  delete document.body.dataset.role;
}

function signOut(message) {
  session++;
  clearTimeout(timer);
  sessionStorage.removeItem(TOKEN_KEY);
  $('dashboard').hidden = true;
  $('signout').hidden = true;
  clearAll();
  $('login').hidden = false;
  $('login-error').textContent = message || '';
  $('status').textContent = '';
}

async function signIn(ev) {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
  $('token').value = '';
  $('login-error').textContent = '';
  showDashboard();
}

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').addEventListener('submit', signIn);
  $('signout').addEventListener('click', () => signOut());
  if (sessionStorage.getItem(TOKEN_KEY)) showDashboard(); else signOut();
});
