// Tollgate's operator console. No framework, no inline code (the page's Content-Security-Policy
// allows only this file): it polls the admin API once a second and draws with DOM calls only, so a
// bucket name or path is always text, never markup. The admin token lives in the password field of
// this tab and is sent only as "Authorization: Bearer" on the switch change.
'use strict';

const HISTORY = 300;          // samples kept per bucket (the server's ring)
const SHOWN = 50;             // buckets asked for: the busiest, or the busiest matching the search
const state = {
  overview: null,
  query: '',                  // the search box: a part of a bucket's path or channel
  history: new Map(),         // bucket -> {forwarded:[], delayed:[], rejected:[], held:[]}
  seq: null,                  // the newest history sample we have
  started: null,              // and the gateway process it came from (its first sample's time)
  clockOffset: 0,             // server now - local now, for the revert countdown
  sortKey: 'bucket',
  sortDir: 1,
  pendingSwitch: null,
  lastRules: 0,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c == null ? '' : String(c)));
  return e;
}

function fmt(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return '\u2013';
  if (typeof v !== 'number') return String(v);
  if (digits === undefined) digits = Number.isInteger(v) ? 0 : 2;
  return v.toFixed(digits);
}

async function getJson(path) {
  const res = await fetch(path, { cache: 'no-store', credentials: 'omit' });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(`${path}: ${res.status} ${body.detail || body.error || ''}`.trim());
  return body;
}

function banner(text) {
  const b = $('banner');
  b.hidden = !text;
  b.textContent = text || '';
}

// ---- history -------------------------------------------------------------------------------------

// Whether an answer to ?since=state.seq continues what we have: not after a gap, nor when the
// gateway restarted (its samples count from 0 again).
function continues(h) {
  return state.seq !== null && h.started_at_ms === state.started && h.from_seq === state.seq + 1 && h.seq - 1 >= state.seq;
}

// Appends an answer's samples; `drop` newest ones left out, so that every bucket's series ends at
// the same sample (a whole-ring answer for new buckets may come a sample after the others).
function mergeHistory(h, drop) {
  for (const b of h.buckets) {
    let s = state.history.get(b.bucket);
    if (!s) { s = { forwarded: [], delayed: [], rejected: [], held: [] }; state.history.set(b.bucket, s); }
    for (const k of Object.keys(s)) {
      const values = drop ? b[k].slice(0, Math.max(0, b[k].length - drop)) : b[k];
      for (const v of values) s[k].push(v);
      if (s[k].length > HISTORY) s[k].splice(0, s[k].length - HISTORY);
    }
  }
}

const bucketParams = (names) => names.map((n) => 'bucket=' + encodeURIComponent(n)).join('&');

// The history of the buckets the overview shows, and of those alone: what we have continues from
// the newest sample we hold; a bucket new to the table gets its whole ring once.
async function pollHistory() {
  const names = state.overview ? state.overview.buckets.map((b) => b.bucket) : [];
  const shown = new Set(names);
  for (const name of [...state.history.keys()]) if (!shown.has(name)) state.history.delete(name);
  if (!names.length) return;
  let fresh = names.filter((n) => !state.history.has(n));
  const known = names.filter((n) => state.history.has(n));
  if (known.length && state.seq !== null) {
    const h = await getJson(`/admin/history?since=${state.seq}&${bucketParams(known)}`);
    if (continues(h)) {
      mergeHistory(h, 0);
      state.seq = h.seq - 1;
    } else {
      // After a gap, or the gateway restarted: start again from the whole ring.
      state.history.clear();
      state.seq = null;
      fresh = names;
    }
  }
  if (!fresh.length) return;
  const h = await getJson(`/admin/history?${bucketParams(fresh)}`);
  if (state.seq === null || h.started_at_ms !== state.started) {
    state.history.clear();
    const all = h.buckets.length === names.length ? h : await getJson(`/admin/history?${bucketParams(names)}`);
    mergeHistory(all, 0);
    state.seq = all.seq - 1;
    state.started = all.started_at_ms;
    return;
  }
  mergeHistory(h, Math.max(0, h.seq - 1 - state.seq));
}

// A small SVG chart of the three series, scaled to their common maximum.
function sparkline(name) {
  const W = 160, H = 28, NS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('width', W);
  svg.setAttribute('height', H);
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  const s = state.history.get(name);
  const base = document.createElementNS(NS, 'line');
  base.setAttribute('class', 'axis');
  base.setAttribute('x1', 0); base.setAttribute('x2', W);
  base.setAttribute('y1', H - 0.5); base.setAttribute('y2', H - 0.5);
  svg.append(base);
  if (!s) return svg;
  let max = 1;
  for (const k of ['forwarded', 'delayed', 'rejected'])
    for (const v of s[k]) if (v !== null && v > max) max = v;
  for (const [k, cls] of [['forwarded', 'fwd'], ['delayed', 'del'], ['rejected', 'rej']]) {
    const values = s[k];
    const pts = [];
    values.forEach((v, i) => {
      if (v === null) return;
      const x = W - (values.length - 1 - i) * (W / (HISTORY - 1));
      pts.push(`${x.toFixed(1)},${(H - 1 - (v / max) * (H - 3)).toFixed(1)}`);
    });
    const line = document.createElementNS(NS, 'polyline');
    line.setAttribute('class', cls);
    line.setAttribute('points', pts.join(' '));
    svg.append(line);
  }
  const title = document.createElementNS(NS, 'title');
  title.textContent = `peak ${fmt(max)}/s over the last ${s.forwarded.length} s`;
  svg.append(title);
  return svg;
}

// ---- overview ------------------------------------------------------------------------------------

function bucketRow(b) {
  const last = b.last_second || {}, minute = b.last_minute || {};
  return {
    b, bucket: b.bucket, channelType: b.channelType, rateLimit: b.rateLimit, burst: b.burst,
    stored_permits: b.stored_permits, debt_s: b.debt_s, held: b.held ?? 0,
    fwd: last.forwarded ?? 0, del: last.delayed ?? 0, rej: last.rejected ?? 0, rej_min: minute.rejected ?? 0,
    wait_p50_ms: b.wait_p50_ms, wait_p99_ms: b.wait_p99_ms, upstream_p90_ms: b.upstream_p90_ms,
  };
}

// The rate column: the rule's rate, and for an adaptive rule the rate it decides at now
// when the upstream's throttling has brought it lower, with a pause if one is running.
function rateCell(b) {
  const a = b.adaptive_state;
  if (b.meter) return el('td', { 'data-col': 'rate', class: 'num', title: `${b.meter.algorithm}: committed rate` }, fmt(b.meter.cir));
  if (!a || b.adaptive === 'off') return el('td', { 'data-col': 'rate', class: 'num' }, fmt(b.rateLimit));
  const eff = a.effective_rate;
  const cut = a.last_cut ? `; last cut ${fmt(a.last_cut.from, 1)} → ${fmt(a.last_cut.to, 1)}/s on ${a.last_cut.cause}` : '';
  const title = `adaptive ${b.adaptive}: deciding at ${eff === null ? 'the rule\'s rate' : fmt(eff, 1) + '/s'}` +
    `; ${a.cuts} cuts, ${a.pauses} pauses, ${a.upstream_throttled} upstream throttles${cut}`;
  const adapted = eff !== null && eff < b.rateLimit;
  return el('td', { 'data-col': 'rate', class: 'num', title },
    fmt(b.rateLimit),
    adapted ? el('span', { class: 'adapted' + (b.adaptive === 'shadow' ? ' muted' : '') }, ` → ${fmt(eff, 1)}`) : '',
    a.paused_ms > 0 ? el('span', { class: 'pill bad small' }, ` paused ${fmt(a.paused_ms / 1000, 1)} s`) : '');
}

// What shares the bucket: its priority classes (highest first) or its three-colour meter, each
// with its requests so far in the title.
function sharingNote(b) {
  if (b.priority) {
    const title = b.priority.classes.map((c) => {
      const n = c.requests || {};
      return `${c.class}${c.reserve ? ` (reserves ${fmt(c.reserve * 100, 0)}%)` : ''}: ` +
        `${(n.forwarded ?? 0) + (n.delayed ?? 0)} admitted, ${n.rejected ?? 0} refused`;
    }).join('; ');
    return el('span', { class: 'muted small', 'data-priority': '', title: `classes by ${b.priority.by}: ${title}` },
      ` classes ${b.priority.classes.map((c) => c.class).join(' › ')}`);
  }
  if (b.meter) {
    const n = b.meter.requests || {};
    return el('span', { class: 'muted small', 'data-meter': '',
      title: `${b.meter.algorithm}, yellow ${b.meter.yellow === 'wait' ? 'held for a green' : 'forwarded marked'}: ` +
        `${n.green ?? 0} green, ${n.yellow ?? 0} yellow, ${n.red ?? 0} red` }, ` ${b.meter.algorithm}`);
  }
  return '';
}

function renderBuckets(o) {
  const rows = o.buckets.map(bucketRow);
  const k = state.sortKey, d = state.sortDir;
  rows.sort((a, b) => {
    const x = a[k], y = b[k];
    if (x === y) return a.bucket < b.bucket ? -1 : 1;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * d;
  });
  const tbody = $('buckets').tBodies[0];
  tbody.replaceChildren(...rows.map((r) => {
    const b = r.b;
    const tr = el('tr', { 'data-bucket': b.bucket, class: (b.saturated ? 'saturated' : '') + (b.status ? '' : ' disabled') });
    const cell = (col, v, digits, cls) => el('td', { 'data-col': col, class: cls || 'num' }, fmt(v, digits));
    tr.append(
      el('td', { 'data-col': 'bucket', title: b.saturated ? 'saturated: refusing now, or its queue is past half the wait window' : '' },
        b.bucket, b.keyBy ? el('span', { class: 'muted small' }, ` per ${b.keyBy}`) : '', sharingNote(b),
        b.status ? '' : el('span', { class: 'muted small' }, ' (off)')),
      el('td', { 'data-col': 'channel', class: '' }, `${b.channelType}${b.scope === 'channel' ? ' (channel)' : ''}`),
      rateCell(b), cell('burst', b.burst, 2), cell('stored', b.stored_permits, 2), cell('debt', b.debt_s, 3),
      cell('held', r.held, 0), cell('forwarded', r.fwd, 0), cell('delayed', r.del, 0), cell('rejected', r.rej, 0),
      cell('rejected_minute', r.rej_min, 0),
      el('td', { 'data-col': 'chart', class: '' }, sparkline(b.bucket)),
      cell('wait_p50', b.wait_p50_ms, 1), cell('wait_p99', b.wait_p99_ms, 1), cell('upstream_p90', b.upstream_p90_ms, 1));
    return tr;
  }));
  for (const th of $('buckets').tHead.rows[0].cells) {
    th.classList.toggle('sorted-asc', th.dataset.sort === k && d > 0);
    th.classList.toggle('sorted-desc', th.dataset.sort === k && d < 0);
  }
}

function renderSwitch(o) {
  const s = o.switch;
  $('switch-state').textContent = s.state;
  const when = s.changed_at_ms ? new Date(s.changed_at_ms).toLocaleString() : 'start';
  $('switch-changed').textContent = `set by ${s.changed_by || 'config'} at ${when} (${s.source})`;
  const pill = $('pill-switch');
  pill.textContent = `switch ${s.state}`;
  pill.className = 'pill ' + (s.state === 'enforce' ? 'good' : s.state === 'shadow' ? 'warn' : 'bad');
  renderCountdown();
}

function renderCountdown() {
  const s = state.overview && state.overview.switch;
  const p = $('switch-revert');
  if (!s || !s.revert_at_ms) { p.textContent = ''; return; }
  const left = Math.max(0, (s.revert_at_ms - (Date.now() + state.clockOffset)) / 1000);
  p.textContent = `reverts to ${s.revert_to} in ${Math.ceil(left)} s`;
}

function dl(id, pairs) {
  $(id).replaceChildren(...pairs.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
}

function renderStore(o) {
  const st = o.store;
  const pill = $('pill-store');
  pill.textContent = `store ${st.name}${st.shared ? (st.up ? ' up' : ' DOWN') : ''}`;
  pill.className = 'pill ' + (st.up ? 'good' : 'bad');
  const pairs = [['Store', `${st.name}${st.shared ? ' (shared by the fleet)' : ' (this process)'}`], ['Up', st.up ? 'yes' : 'no']];
  if (st.shared) {
    pairs.push(['Live instances', st.live_instances], ['Incidents', st.incidents],
      ['Failure policy', `${st.failure_policy} (${st.policy_decisions} decisions by it)`]);
    if (st.last_error) pairs.push(['Last error', st.last_error]);
    for (const n of st.nodes) pairs.push([`Node ${n.node}`, n.up ? 'ready' : 'not ready']);
  }
  pairs.push(['Held now', fmt(o.held, 0)], ['Client connections', fmt(o.connections, 0)]);
  dl('store', pairs);
  const cs = o.config_source, cfg = o.config || {};
  const healthy = !cs || cs.healthy;
  const cpill = $('pill-config');
  cpill.textContent = `config v${cfg.version ?? '?'}${healthy ? '' : ' (source down)'}${cfg.rejected_rows ? `, ${cfg.rejected_rows} rejected` : ''}`;
  cpill.className = 'pill ' + (!healthy ? 'bad' : cfg.rejected_rows ? 'warn' : 'good');
  const cpairs = [['Config', `version ${cfg.version ?? '?'} from ${cfg.source ?? '?'}`], ['Rejected rows', fmt(cfg.rejected_rows ?? 0)]];
  if (cs) {
    cpairs.push(['Source healthy', cs.healthy ? 'yes' : 'no'], ['Last good read', `${fmt(cs.last_success_age_s, 1)} s ago`],
      ['Loads ok / failed', `${cs.loads_ok} / ${cs.loads_failed}`]);
    if (cs.last_error) cpairs.push(['Last error', cs.last_error]);
  }
  dl('config', cpairs);
}

// An upstream's TLS in words: verified or not, and the days left on the certificates that will
// expire first; tinted under 14 days (warn) and when expired or not verified (bad).
function tlsCell(t) {
  if (!t) return el('td', { class: 'tls' }, 'plain HTTP');
  const days = [t.peer_certificate_days_left, t.client_certificate_days_left].filter((d) => d !== null && d !== undefined);
  const least = days.length ? Math.min(...days) : null;
  let text = t.insecure_skip_verify ? 'NOT VERIFIED' : `verified (${t.server_name})`;
  if (least !== null) text += least < 0 ? ', certificate expired' : `, expires in ${Math.floor(least)} d`;
  const tint = t.insecure_skip_verify || (least !== null && least < 0) ? 'bad' : least !== null && least < 14 ? 'warn' : '';
  return el('td', { class: `tls ${tint}`, 'data-days': least === null ? '' : String(Math.floor(least)) }, text);
}

// An upstream's endpoints: each address, "ejected" when out, and the requests on it now; or
// "unresolved" (tinted) while its names do not resolve.
function endpointsCell(u) {
  if (u.resolved === false) return el('td', { class: 'endpoints bad' }, 'unresolved: 503 until it resolves');
  const eps = u.endpoints ?? [];
  const text = eps.map((e) => `${e.endpoint}${e.up ? '' : ' ejected'} (${e.outstanding})`).join(', ');
  return el('td', { class: `endpoints ${eps.some((e) => !e.up) ? 'warn' : ''}` }, text);
}

// An upstream's supplier credential: its type, and for OAuth2 the token's time left, the last
// refresh and the failed token requests (tinted when no token is held). Never the secret.
function authCell(a) {
  if (!a) return el('td', { class: 'auth' }, 'none');
  if (a.type === 'header') return el('td', { class: 'auth' }, 'static header');
  const left = a.expires_in_s === null ? 'no token' : `token expires in ${Math.floor(a.expires_in_s)} s`;
  const last = a.last_refresh_unix ? `, refreshed ${new Date(a.last_refresh_unix * 1000).toLocaleTimeString()}` : '';
  const failed = a.failures ? `, ${a.failures} failed` : '';
  const tint = a.expires_in_s === null ? 'bad' : a.failures ? 'warn' : '';
  return el('td', { class: `auth ${tint}`, title: a.last_error || '' }, `OAuth2: ${left}${last}${failed}`);
}

function renderUpstreams(o) {
  $('upstreams').tBodies[0].replaceChildren(...o.upstreams.map((u) => {
    const e = u.errors_last_minute ?? {};
    return el('tr', { 'data-upstream': u.upstream },
      el('td', {}, u.upstream), el('td', { class: 'num' }, fmt(u.responses_last_minute, 0)),
      el('td', { class: 'num' }, fmt(u.latency_p50_ms, 1)), el('td', { class: 'num' }, fmt(u.latency_p99_ms, 1)),
      el('td', { class: 'num' }, fmt(e.connect, 0)), el('td', { class: 'num' }, fmt(e.reset, 0)),
      el('td', { class: 'num' }, fmt(e.timeout, 0)), endpointsCell(u), tlsCell(u.tls), authCell(u.auth));
  }));
}

function renderPolicies(o) {
  $('policies').tBodies[0].replaceChildren(...o.policies.map((p) => el('tr', {},
    el('td', {}, p.rule), el('td', {}, p.policy), el('td', { class: 'num' }, fmt(p.passed)),
    el('td', { class: 'num' }, fmt(p.failed)), el('td', { class: 'num' }, fmt(p.bound)))));
}

// What the table shows: the busiest buckets, or the busiest that match the search box.
function overviewPath() {
  const q = state.query.trim();
  return `/admin/overview?top=${SHOWN}` + (q ? `&q=${encodeURIComponent(q)}` : '');
}

function renderShown(o) {
  const q = state.query.trim();
  const matched = o.buckets_matched ?? o.buckets.length, total = o.buckets_total ?? o.buckets.length;
  $('buckets-shown').textContent = q
    ? `${o.buckets.length} of ${matched} matching "${q}" shown, busiest first (${total} buckets in all)`
    : `${o.buckets.length} of ${total} shown, busiest first` + (o.buckets.length < total ? '; search to find the others' : '');
}

async function pollOverview() {
  const o = await getJson(overviewPath());
  state.overview = o;
  state.clockOffset = o.now_ms - Date.now();
  renderShown(o);
  renderSwitch(o);
  renderStore(o);
  renderUpstreams(o);
  renderPolicies(o);
}

async function pollRefusals() {
  const r = await getJson('/admin/refusals?limit=50');
  $('refusals-total').textContent = `${r.total} since start; the last ${r.capacity} are kept, 50 shown`;
  $('refusals').tBodies[0].replaceChildren(...r.refusals.map((x) => el('tr', {},
    el('td', {}, new Date(x.at_ms).toLocaleTimeString()), el('td', { class: 'num' }, x.status), el('td', {}, x.path),
    el('td', {}, x.bucket), el('td', {}, x.policy || '\u2013'),
    el('td', {}, x.key_by ? `${x.key_by} ${x.key_shape || ''}` : '\u2013'), el('td', { class: 'num' }, `${x.retry_after_s} s`))));
}

async function pollRules() {
  const r = await getJson('/admin/rules');
  $('rules-version').textContent = `version ${r.version} from ${r.source}`;
  $('rules').tBodies[0].replaceChildren(...r.rules.map((x) => el('tr', { class: x.status ? '' : 'disabled' },
    el('td', {}, x.configId), el('td', {}, x.channelType), el('td', {}, x.bucket),
    el('td', { class: 'num' }, fmt(x.rateLimit)), el('td', { class: 'num' }, fmt(x.cache)),
    el('td', {}, x.status ? 'on' : 'off'), el('td', {}, x.policies || ''))));
  const rejected = r.rejected.length ? r.rejected.map((x) => el('tr', {},
    el('td', {}, x.origin), el('td', {}, x.field), el('td', {}, x.message || x.reason), el('td', {}, x.kept_previous ? 'yes' : 'no')))
    : [el('tr', {}, el('td', { colspan: 4, class: 'muted' }, 'none: every row is in force'))];
  $('rejected-rows').tBodies[0].replaceChildren(...rejected);
}

// ---- switch --------------------------------------------------------------------------------------

function message(text, ok) {
  const m = $('switch-message');
  m.textContent = text;
  m.className = 'message ' + (ok ? 'ok' : 'err');
}

function askSwitch() {
  const mode = $('switch-mode').value;
  const after = $('switch-revert-after').value.trim();
  if (!$('token').value) { message('Enter the admin token first.', false); return; }
  if (after && !(Number(after) >= 1 && Number(after) <= 86400)) { message('Revert after: 1 to 86400 seconds, or empty.', false); return; }
  state.pendingSwitch = { state: mode, ...(after ? { revert_after_s: Number(after) } : {}) };
  $('switch-confirm-text').textContent =
    `Set the switch to "${mode}" for the whole fleet${after ? `, reverting after ${after} s` : ''}?`;
  $('switch-confirm').hidden = false;
}

async function applySwitch() {
  const body = state.pendingSwitch;
  $('switch-confirm').hidden = true;
  state.pendingSwitch = null;
  if (!body) return;
  try {
    const res = await fetch('/admin/switch', {
      method: 'PUT', cache: 'no-store', credentials: 'omit',
      headers: { 'Authorization': 'Bearer ' + $('token').value, 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
    const answer = await res.json().catch(() => ({}));
    if (res.ok) {
      message(`Switch is now "${answer.state}" (was "${answer.previous}").`, true);
      pollOverview().catch(() => {});
    } else if (res.status === 401) {
      message(`Refused (401): ${answer.detail || 'wrong token'}. Nothing was changed.`, false);
    } else {
      message(`Refused (${res.status}): ${answer.detail || answer.error || 'error'}. Nothing was changed.`, false);
    }
  } catch (e) {
    message(`The gateway did not answer: ${e.message}`, false);
  }
}

// ---- main loop -----------------------------------------------------------------------------------

async function tick() {
  try {
    await pollOverview();
    await pollHistory();
    renderBuckets(state.overview);
    await pollRefusals();
    if (Date.now() - state.lastRules > 5000) { await pollRules(); state.lastRules = Date.now(); }
    banner('');
    $('updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    banner(`Cannot read the admin API: ${e.message}`);
  }
}

// One tick at a time: a search's early tick and the loop's never interleave their history reads.
let running = null;
function refresh() {
  if (!running) running = tick().finally(() => { running = null; });
  return running;
}

function start() {
  for (const th of $('buckets').tHead.rows[0].cells) {
    if (!th.dataset.sort) continue;
    th.addEventListener('click', () => {
      if (state.sortKey === th.dataset.sort) state.sortDir = -state.sortDir;
      else { state.sortKey = th.dataset.sort; state.sortDir = th.dataset.sort === 'bucket' || th.dataset.sort === 'channelType' ? 1 : -1; }
      if (state.overview) renderBuckets(state.overview);
    });
  }
  // A search asks the server at once (and on every tick after), not only among the rows shown.
  $('bucket-search').addEventListener('input', () => {
    state.query = $('bucket-search').value;
    clearTimeout(state.searchTimer);
    state.searchTimer = setTimeout(refresh, 200);
  });
  $('switch-apply').addEventListener('click', askSwitch);
  $('switch-confirm-yes').addEventListener('click', applySwitch);
  $('switch-confirm-no').addEventListener('click', () => { $('switch-confirm').hidden = true; state.pendingSwitch = null; message('Cancelled.', true); });
  const loop = async () => { await refresh(); setTimeout(loop, 1000); };
  loop();
  setInterval(renderCountdown, 250);
}

document.addEventListener('DOMContentLoaded', start);
