/* ---------- the cross-rank page ---------- */
let D = null, L = null;  // the data; the layout of the rows
const LEFT = 150, RIGHT = 16, AXIS = 28, GAP = 4;
const C = { req: '#4c78d8', res: '#f08c2e', bandA: 'rgba(47,111,222,.08)', bandB: 'rgba(47,111,222,.18)',
            max: '#fbe3ea', min: '#e2f4e8', peak: '#d6336c', low: '#1f9d55', grid: '#e3e7ef', ink: '#1c2333', muted: '#687086' };
const rankOf = (r) => D.ranks.find((x) => x.rank === r);
function seriesMax(a) { let m = 0; for (const v of a) if (v > m) m = v; return m; }

function card(k, v, d, bad) {
  return '<div class="stat' + (bad ? ' bad' : '') + '"><div class="k">' + esc(k) + '</div><div class="v">' + v +
         '</div><div class="d">' + (d || '') + '</div></div>';
}

function showSummary() {
  const hi = rankOf(D.maxRank), lo = rankOf(D.minRank);
  let h = card('Ranks', D.ranks.length, 'world size ' + D.worldSize);
  if (hi && lo) {
    h += card('Largest peak allocated', fmtBytes(hi.peakAllocated), 'rank ' + hi.rank + (hi.host ? ' on ' + esc(hi.host) : ''), D.imbalance === null || D.imbalance > 1.1);
    h += card('Smallest peak allocated', fmtBytes(lo.peakAllocated), 'rank ' + lo.rank + (lo.host ? ' on ' + esc(lo.host) : ''));
    h += card('Imbalance', D.imbalance === null ? 'n/a' : D.imbalance.toFixed(3) + 'x',
              D.imbalanceSite ? 'most of the difference: ' + esc(D.imbalanceSite) : 'largest / smallest peak allocated',
              D.imbalance === null || D.imbalance > 1.1);
    const res = D.ranks.reduce((a, r) => (r.peakReserved > a.peakReserved ? r : a), D.ranks[0]);
    h += card('Largest peak reserved', fmtBytes(res.peakReserved), 'rank ' + res.rank);
  }
  $('summary').innerHTML = h;
  if (D.problems.length) {
    $('problems').innerHTML = '<b>Left out or doubtful</b> (the other ranks are shown):<br>' + D.problems.map(esc).join('<br>');
    $('problems').classList.remove('hidden');
  }
}

function showTable() {
  const top = Math.max(1, seriesMax(D.ranks.map((r) => r.peakAllocated)));
  let h = '<table><tr><th class="n">rank</th><th>host</th><th>device</th><th class="n">peak allocated</th>' +
          '<th class="n">peak reserved</th><th class="n">ext. frag.</th><th class="n">OOMs</th><th class="n">steps</th>' +
          '<th>top site (peak requested)</th><th>full view</th></tr>';
  for (const r of D.ranks) {
    const cls = 'row' + (r.rank === D.maxRank ? ' max' : r.rank === D.minRank ? ' min' : '');
    h += '<tr class="' + cls + '" data-rank="' + r.rank + '"><td class="n">' + r.rank + '</td><td>' + esc(r.host || '?') +
         '</td><td>' + esc(r.device || '?') + '</td><td class="n">' + fmtBytes(r.peakAllocated) + (r.peaksFromTrace ? ' *' : '') +
         '<span class="bar" style="width:' + Math.round(60 * r.peakAllocated / top) + 'px"></span></td><td class="n">' +
         fmtBytes(r.peakReserved) + '</td><td class="n">' + (r.extFrag === null ? '-' : fmtPct(r.extFrag)) + '</td><td class="n">' +
         r.numOoms + '</td><td class="n">' + r.steps.x0.length + '</td><td class="site">' +
         (r.topSite ? esc(r.topSite) + ' <span class="loc">' + fmtBytes(r.topSiteBytes) + '</span>' : '-') + '</td><td>' +
         (r.page ? 'embedded' : '<span class="loc">not embedded</span>') + '</td></tr>';
  }
  h += '</table>';
  $('rank-table').innerHTML = h;
  if (D.ranks.some((r) => r.peaksFromTrace))
    $('rank-table').insertAdjacentHTML('afterend', '<div class="sub">* peaks from the trace (allocated replayed on the default policy, reserved as recorded)</div>');
  for (const tr of document.querySelectorAll('#rank-table tr.row')) tr.addEventListener('click', () => drill(Number(tr.dataset.rank)));
}

function layout() {
  let x0 = Infinity, x1 = -Infinity;
  for (const r of D.ranks) {
    for (const a of [r.x, r.steps.x0, r.steps.x1]) if (a.length) { x0 = Math.min(x0, a[0]); x1 = Math.max(x1, a[a.length - 1]); }
    r.maxReq = seriesMax(r.requestedInUse);
    r.maxRes = seriesMax(r.reserved);
  }
  if (!isFinite(x0)) { x0 = 0; x1 = 1; }
  if (x1 <= x0) x1 = x0 + 1;
  const n = D.ranks.length;
  return { x0, x1, n, rowH: n <= 8 ? 64 : n <= 16 ? 48 : n <= 64 ? 30 : 18 };
}

function tickLabel(x, step) {
  if (D.align === 'steps') return 'step ' + Math.round(x);
  return fmtDurAxis(x * 1e6);
}

function draw() {
  const c = $('rk'), W = c.clientWidth, H = L.n * L.rowH + AXIS, s = dpr();
  c.style.height = H + 'px';
  c.width = Math.round(W * s);
  c.height = Math.round(H * s);
  const g = c.getContext('2d');
  g.setTransform(s, 0, 0, s, 0, 0);
  g.clearRect(0, 0, W, H);
  const pw = Math.max(10, W - LEFT - RIGHT), X = (x) => LEFT + (x - L.x0) / (L.x1 - L.x0) * pw;
  const showRes = $('rk-reserved').checked, shared = $('rk-shared').checked;
  const rowMax = (r) => Math.max(1, showRes ? Math.max(r.maxReq, r.maxRes) : r.maxReq);
  const all = Math.max(...D.ranks.map(rowMax));
  // Ticks: whole steps, or round times.
  let step = niceStep((L.x1 - L.x0) / Math.max(1, pw / 90));
  if (D.align === 'steps') step = Math.max(1, step);
  g.font = '11px system-ui,sans-serif';
  g.textBaseline = 'top';
  for (let t = Math.ceil(L.x0 / step) * step; t <= L.x1; t += step) {
    const px = Math.round(X(t)) + 0.5;
    g.strokeStyle = C.grid;
    g.beginPath(); g.moveTo(px, 0); g.lineTo(px, L.n * L.rowH); g.stroke();
    g.fillStyle = C.muted;
    g.fillText(tickLabel(t, step), px + 2, L.n * L.rowH + 6);
  }
  let points = 0;
  D.ranks.forEach((r, i) => {
    const top = i * L.rowH, h = L.rowH - GAP, base = top + h, scale = (shared ? all : rowMax(r)) / (h - 2);
    const Y = (v) => base - v / scale;
    if (r.rank === D.maxRank || r.rank === D.minRank) {
      g.fillStyle = r.rank === D.maxRank ? C.max : C.min;
      g.fillRect(0, top, W, h);
    }
    for (let k = 0; k < r.steps.x0.length; k++) {
      g.fillStyle = k % 2 ? C.bandB : C.bandA;
      g.fillRect(X(r.steps.x0[k]), top, Math.max(1, X(r.steps.x1[k]) - X(r.steps.x0[k])), h);
    }
    const n = r.x.length, end = X(L.x1);
    points += n;
    if (n) {  // each point holds until the next one: a step line
      g.beginPath();
      g.moveTo(X(r.x[0]), base);
      for (let j = 0; j < n; j++) {
        g.lineTo(X(r.x[j]), Y(r.requestedInUse[j]));
        g.lineTo(j + 1 < n ? X(r.x[j + 1]) : Math.min(end, X(r.x[j]) + 1), Y(r.requestedInUse[j]));
      }
      g.lineTo(Math.min(end, X(r.x[n - 1]) + 1), base);
      g.closePath();
      g.fillStyle = C.req;
      g.fill();
      if (showRes) {
        g.beginPath();
        for (let j = 0; j < n; j++) {
          g[j ? 'lineTo' : 'moveTo'](X(r.x[j]), Y(r.reserved[j]));
          g.lineTo(j + 1 < n ? X(r.x[j + 1]) : Math.min(end, X(r.x[j]) + 1), Y(r.reserved[j]));
        }
        g.strokeStyle = C.res;
        g.lineWidth = 1.5;
        g.stroke();
        g.lineWidth = 1;
      }
    }
    if (page.drilled === r.rank) {
      g.strokeStyle = C.ink;
      g.strokeRect(0.5, top + 0.5, W - 1, h - 1);
    }
    g.fillStyle = r.rank === D.maxRank ? C.peak : r.rank === D.minRank ? C.low : C.ink;
    g.font = '600 12px system-ui,sans-serif';
    g.fillText('rank ' + r.rank + (r.rank === D.maxRank ? ' \u25b2' : r.rank === D.minRank ? ' \u25bc' : ''), 6, top + 2);
    if (h >= 26) {
      g.font = '11px system-ui,sans-serif';
      g.fillStyle = C.muted;
      g.fillText(fmtBytes(r.peakAllocated) + ' peak', 6, top + 16);
    }
    g.strokeStyle = C.grid;
    g.beginPath(); g.moveTo(0, base + GAP / 2); g.lineTo(W, base + GAP / 2); g.stroke();
  });
  page.stats = { ranks: L.n, points, width: W, height: H, x0: L.x0, x1: L.x1, drawn: (page.stats.drawn || 0) + 1 };
}

// The rank and the axis value under the mouse, or null.
function at(ev) {
  const c = $('rk'), b = c.getBoundingClientRect(), px = ev.clientX - b.left, py = ev.clientY - b.top;
  const i = Math.floor(py / L.rowH), pw = Math.max(10, b.width - LEFT - RIGHT);
  if (i < 0 || i >= L.n) return null;
  return { r: D.ranks[i], x: L.x0 + (px - LEFT) / pw * (L.x1 - L.x0), inPlot: px >= LEFT };
}

function hover(ev) {
  const a = at(ev), tip = $('tip');
  if (!a) { tip.style.display = 'none'; return; }
  const r = a.r;
  let h = '<b>rank ' + r.rank + '</b> <span class="dim">' + esc(r.host || '') + ' ' + esc(r.device || '') + '</span><br>' +
          'peak allocated ' + fmtBytes(r.peakAllocated) + ', reserved ' + fmtBytes(r.peakReserved);
  if (a.inPlot) {
    const j = upperBound(r.x, a.x, r.x.length) - 1;
    const k = upperBound(r.steps.x0, a.x, r.steps.x0.length) - 1;
    h += '<br>' + (D.align === 'steps' ? 'x = ' + a.x.toFixed(2) + ' steps' : 't = ' + fmtDur(a.x * 1e6));
    if (k >= 0 && a.x <= r.steps.x1[k]) h += ', in ' + esc(r.steps.name[k]) + ' (' + fmtDur(r.steps.us[k]) + ')';
    if (j >= 0) h += '<br>requested ' + fmtBytes(r.requestedInUse[j]) + ', reserved ' + fmtBytes(r.reserved[j]) +
                     ' <span class="dim">(the most in this stretch)</span>';
  }
  h += '<br><span class="dim">' + (r.page ? 'click for its full view' : 'click: how to open its full view') + '</span>';
  tip.innerHTML = h;
  tip.style.display = 'block';
  tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + 'px';
  tip.style.top = Math.min(ev.clientY + 14, window.innerHeight - tip.offsetHeight - 8) + 'px';
}

function drill(rank) {
  const r = rankOf(rank);
  if (!r) return;
  const el = $('gmp-rank-page-' + rank), f = $('drill'), note = $('drill-note');
  $('drill-card').classList.remove('hidden');
  $('drill-title').textContent = 'Rank ' + rank + (r.host ? ' on ' + r.host : '') + (r.device ? ' (' + r.device + ')' : '') + ': full view';
  if (el) {
    note.classList.add('hidden');
    f.classList.remove('hidden');
    f.srcdoc = JSON.parse(el.textContent);
  } else {
    f.classList.add('hidden');
    f.removeAttribute('srcdoc');
    const n = D.ranks.filter((x) => x.page).length;
    note.innerHTML = 'This page embeds the full view of ' + n + ' rank(s): those with the largest peak allocated, and the smallest. ' +
                     'For rank ' + rank + ': <span class="mono">gpumemprof html ' + esc(r.file) + ' -o rank-' + rank + '.html</span>';
    note.classList.remove('hidden');
  }
  page.drilled = rank;
  for (const tr of document.querySelectorAll('#rank-table tr.row')) tr.classList.toggle('sel', Number(tr.dataset.rank) === rank);
  draw();
  $('drill-card').scrollIntoView({ block: 'start' });
}

function init() {
  try {
    D = JSON.parse($('gmp-ranks-data').textContent);
    for (const r of D.ranks) {  // the summary's names, as the page uses them
      const f = r.facts;
      Object.assign(r, { host: f.host, device: f.device, file: f.file, peakAllocated: f.peak_allocated_bytes,
                         peakReserved: f.peak_reserved_bytes, peaksFromTrace: f.peaks_from_trace,
                         extFrag: f.external_fragmentation, numOoms: f.num_ooms, topSite: f.top_site, topSiteBytes: f.top_site_bytes });
    }
    $('title').textContent = D.title;
    $('subtitle').textContent = D.ranks.length + ' rank(s), world size ' + D.worldSize;
    $('rk-hint').textContent = D.alignNote + ' One row per rank: requested bytes held (filled) and reserved bytes (line), ' +
      'each point the most in its stretch of time, so no peak is lost. Hover for values; click a row for that rank\u2019s full view.';
    $('footer').textContent = D.generator;
    showSummary();
    showTable();
    L = layout();
    draw();
    const c = $('rk');
    c.addEventListener('mousemove', hover);
    c.addEventListener('mouseleave', () => { $('tip').style.display = 'none'; });
    c.addEventListener('click', (ev) => { const a = at(ev); if (a) drill(a.r.rank); });
    for (const id of ['rk-reserved', 'rk-shared']) $(id).addEventListener('change', draw);
    $('drill-close').addEventListener('click', () => {
      $('drill-card').classList.add('hidden');
      $('drill').removeAttribute('srcdoc');
      page.drilled = null;
      draw();
    });
    window.addEventListener('resize', draw);
    $('loading').classList.add('hidden');
    setState('ready');
  } catch (e) {
    $('loading').textContent = 'This page could not be shown: ' + e.message;
    $('loading').classList.add('err');
    setState('error');
    throw e;
  }
}
init();
