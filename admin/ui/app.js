// tollgated's dashboard: reads this node's admin API and /metrics with the
// admin token the operator signs in with, and redraws every REFRESH_MS.
// Plain script, no build step; it writes data into the page only as text.
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

class Unauthorized extends Error {}

// api calls the admin API with the token; a problem answer becomes an
// Error carrying its status, code and detail.
async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const resp = await fetch(path, {
    headers: { Authorization: 'Bearer ' + token },
    cache: 'no-store',
    redirect: 'error',
  });
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
  return (await api(path)).json();
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
      const held = (a.funds && a.funds.held_unspent) || 0;
      const used = Math.min(Math.max(a.budget.allowance - a.allowance_left - held, 0), a.budget.allowance);
      spent.append(meter(used / a.budget.allowance), fmtNumber(used) + ' / ' + fmtNumber(a.budget.allowance) + ' per ' + a.budget.period);
    } else {
      spent.textContent = '–';
    }
    rows.push({
      attrs: { account: a.id },
      cells: [name, el('span', 'status-' + a.status, a.status), spent, fmtTime(a.period_end),
        fmtNumber(a.funds.available), fmtNumber(a.funds.in_leases), fmtNumber(a.settled)],
    });
    for (const k of (kids[id] || []).sort()) walk(k, depth + 1);
  };
  for (const r of roots.sort()) walk(r, 0);
  fill($('accounts'), rows);
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
  try {
    const [metricsText, accounts, leases] = await Promise.all([
      api('/metrics').then((r) => r.text()),
      listAll('/v1/accounts'),
      listAll('/v1/leases?active=true'),
      refreshAudit(),
    ]);
    samples.push(sampleOf(parseMetrics(metricsText), Date.now()));
    if (samples.length > HISTORY) samples = samples.slice(-HISTORY);
    renderTraffic();
    renderDenials();
    renderLatency();
    renderShards();
    renderAccounts(accounts);
    renderLeases(leases);
    $('status').textContent = 'updated ' + new Date().toLocaleTimeString();
    document.body.dataset.refreshed = String(samples.length);
  } catch (e) {
    if (e instanceof Unauthorized) {
      signOut('The admin token was refused (401): sign in again.');
      return;
    }
    $('status').textContent = String(e.message || e);
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

function showDashboard() {
  $('login').hidden = true;
  $('dashboard').hidden = false;
  $('signout').hidden = false;
  refresh();
}

function signOut(message) {
  clearTimeout(timer);
  sessionStorage.removeItem(TOKEN_KEY);
  samples = [];
  auditCursor = null;
  auditRows = [];
  $('dashboard').hidden = true;
  $('signout').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = message || '';
  $('status').textContent = '';
}

async function signIn(ev) {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $('token').value.trim());
  $('token').value = '';
  try {
    await getJSON('/v1/accounts?limit=1');
  } catch (e) {
    signOut(e instanceof Unauthorized ? 'That token was refused (401 unauthorized).' : String(e.message || e));
    return;
  }
  $('login-error').textContent = '';
  showDashboard();
}

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').addEventListener('submit', signIn);
  $('signout').addEventListener('click', () => signOut());
  if (sessionStorage.getItem(TOKEN_KEY)) showDashboard(); else signOut();
});
