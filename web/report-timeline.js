// Drawing stays fast on million-entry traces by level of detail: the timeline bins states into
// pixel columns (each column shows the state with the most active memory in it, so peaks never
// vanish), draws only the largest allocations of the view as bands (the rest are summed into one
// band) and writes pixels directly; hover and click recompute one column on demand.
/* ---------- tooltip ---------- */
const tip = $('tip');
function showTip(html, ev) {
  tip.innerHTML = html; tip.style.display = 'block';
  const w = tip.offsetWidth, h = tip.offsetHeight, vw = window.innerWidth, vh = window.innerHeight;
  let x = ev.clientX + 14, y = ev.clientY + 14;
  if (x + w > vw - 8) x = Math.max(8, ev.clientX - w - 14);
  if (y + h > vh - 8) y = Math.max(8, ev.clientY - h - 14);
  tip.style.left = x + 'px'; tip.style.top = y + 'px';
}
function hideTip() { tip.style.display = 'none'; }
const windowMouse = { move: null, up: null };  // the open timeline's drag handlers
window.addEventListener('mousemove', (ev) => { if (windowMouse.move) windowMouse.move(ev); });
window.addEventListener('mouseup', (ev) => { if (windowMouse.up) windowMouse.up(ev); });

/* ---------- timeline ---------- */
function Timeline(dev, onInstant) {
  const cv = $('tl'), ov = $('ov'), ctx = cv.getContext('2d'), octx = ov.getContext('2d');
  const E = dev.E, times = dev.times, total = dev.total, start = dev.start, end = dev.end, size = dev.size;
  // Opens on wall-clock time unless the model found it mostly idle (summary.openOnEvents).
  const T = { mode: E > 1 && times[E - 1] > times[0] && !dev.sum.openOnEvents ? 'time' : 'event', v0: 0, v1: 1, showReserved: true,
    highlight: null, selected: dev.peak, samp: null, colTot: null, cand: null, k: 1, ymax: 1,
    px: 0, py: 0, W: 1, H: 1, ox: 0, oy: 0, oW: 1, oH: 1, ovCache: null, pending: false };

  function domain() {
    if (T.mode === 'event') return [0, E + 1];
    const a = times[0], b = times[E - 1], pad = Math.max(1, (b - a) * 0.004);
    return [a - pad, b + pad];
  }
  function stateAt(x) { return T.mode === 'event' ? clamp(Math.floor(x), 0, E) : upperBound(times, x, E); }
  function statesBefore(x) { return T.mode === 'event' ? clamp(Math.ceil(x) - 1, 0, E) : lowerBound(times, x, E); }
  function stateBegin(s) { return T.mode === 'event' ? s : s === 0 ? domain()[0] : times[s - 1]; }
  function xOfTime(t) { return T.mode === 'time' ? t : upperBound(times, t, E); }
  function toPx(x) { return T.px + (x - T.v0) / (T.v1 - T.v0) * T.W; }

  function layout() {
    const r = dpr();
    cv.width = Math.max(200, Math.round(cv.clientWidth * r)); cv.height = Math.round(cv.clientHeight * r);
    ov.width = cv.width; ov.height = Math.round(ov.clientHeight * r);
    const top = 22 + dev.laneRows * 11;
    T.px = Math.round(78 * r); T.py = Math.round(top * r);
    T.W = Math.max(10, cv.width - T.px - Math.round(16 * r)); T.H = Math.max(10, cv.height - T.py - Math.round(30 * r));
    T.ox = T.px; T.oy = Math.round(4 * r); T.oW = T.W; T.oH = ov.height - Math.round(8 * r);
    T.ovCache = null;
  }

  /* Column c covers x in [v0 + c*step, v0 + (c+1)*step): the states lo..hi overlap it, and the
     column shows the one with the most active bytes (max-preserving level of detail). */
  function sampleColumns(W, v0, v1, out, outTot) {
    const [d0, d1] = domain(), step = (v1 - v0) / W;
    let lo0 = Infinity, hi1 = -1, ymax = 0;
    for (let c = 0; c < W; c++) {
      const xa = v0 + c * step, xb = xa + step;
      if (xb <= d0 || xa >= d1) { out[c] = -1; outTot[c] = 0; continue; }
      const lo = stateAt(xa);
      let hi = statesBefore(xb);
      if (hi < lo) hi = lo;
      let best = lo, bv = total[lo];
      for (let s = lo + 1; s <= hi; s++) { const v = total[s]; if (v > bv) { bv = v; best = s; } }
      out[c] = best; outTot[c] = bv;
      if (bv > ymax) ymax = bv;
      if (lo < lo0) lo0 = lo;
      if (hi > hi1) hi1 = hi;
    }
    return { lo: lo0, hi: hi1, ymax };
  }

  let colorCache = null;
  function allocColors() {
    const tag = groupMode + '/' + T.highlight;
    if (colorCache && colorCache.tag === tag) return colorCache;
    const n = dev.n, px = new Uint32Array(n), edge = new Uint32Array(n), stack = dev.stack;
    // Without any stack every band would be the same gray: cycle muted hues instead.
    let anyStack = false;
    for (let i = 0; i < n && !anyStack; i++) anyStack = stack[i] >= 0;
    for (let i = 0; i < n; i++) {
      const key = keyOfStack(stack[i]), pal = keyPalette(anyStack ? key : -2 - (i % HUES.length));
      const dim = T.highlight !== null && key !== T.highlight;
      px[i] = dim ? pal.dim : pal.px[i % 3]; edge[i] = dim ? pal.dimEdge : pal.edge[i % 3];
    }
    colorCache = { tag, px, edge };
    return colorCache;
  }

  function fillCol(buf, W, H, c, y0, y1, col, edge) {
    let idx = (H - 1 - y0) * W + c;
    if (y1 - y0 >= 4) { for (let y = y0; y < y1 - 1; y++, idx -= W) buf[idx] = col; buf[idx] = edge; }
    else for (let y = y0; y < y1; y++, idx -= W) buf[idx] = col;
  }

  function render() {
    T.pending = false;
    if (T.disposed) return;  // replaced by another device's timeline
    const t0 = performance.now(), W = T.W, H = T.H;
    const samp = new Int32Array(W), colTot = new Float64Array(W);
    const span = sampleColumns(W, T.v0, T.v1, samp, colTot);
    let ymax = span.ymax;
    if (T.showReserved && span.hi >= 0) ymax = Math.max(ymax, reservedMax(dev, span.lo, span.hi));
    ymax = ymax > 0 ? ymax * 1.06 : 1024;
    const k = H / ymax, minSize = 0.75 / k;
    // Allocations at least ~1 px tall in this view get their own band; the others are summed
    // into the gray band. At most H / 0.75 such bands can be live in one column, so a render
    // costs O(allocations + W x H) whatever the trace length.
    const n = dev.n, cand = new Uint8Array(n), colr = allocColors();
    let ncand = 0;
    for (let i = 0; i < n; i++) if (size[i] >= minSize && start[i] <= span.hi && end[i] > span.lo) { cand[i] = 1; ncand++; }
    const img = ctx.createImageData(W, H), buf = new Uint32Array(img.data.buffer);
    buf.fill(WHITE);
    // Sweep the columns left to right keeping the live candidates in a linked list in allocation
    // order (allocations are sorted by start, so a new one always goes last).
    const next = new Int32Array(n), prev = new Int32Array(n), byEnd = dev.byEnd;
    const smallCol = T.highlight !== null ? SMALL_DIM : SMALL;
    let head = -1, tail = -1, ip = 0, ie = 0, drawn = 0, maxLive = 0;
    for (let c = 0; c < W; c++) {
      const s = samp[c];
      if (s < 0) continue;
      drawn++;
      for (; ip < n && start[ip] <= s; ip++) {
        if (!cand[ip]) continue;
        prev[ip] = tail; next[ip] = -1;
        if (tail >= 0) next[tail] = ip; else head = ip;
        tail = ip;
      }
      for (; ie < n && end[byEnd[ie]] <= s; ie++) {
        const i = byEnd[ie];
        if (!cand[i]) continue;
        const a = prev[i], b = next[i];
        if (a >= 0) next[a] = b; else head = b;
        if (b >= 0) prev[b] = a; else tail = a;
      }
      let cum = 0, y0 = 0, live = 0;
      for (let i = head; i >= 0; i = next[i]) {
        cum += size[i]; live++;
        let y1 = Math.round(cum * k);
        if (y1 > H) y1 = H;
        if (y1 > y0) { fillCol(buf, W, H, c, y0, y1, colr.px[i], colr.edge[i]); y0 = y1; }
      }
      if (live > maxLive) maxLive = live;
      let yt = Math.round(colTot[c] * k);
      if (yt > H) yt = H;
      if (yt > y0) fillCol(buf, W, H, c, y0, yt, smallCol, SMALL_EDGE);
    }
    Object.assign(T, { samp, colTot, cand, k, ymax });
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, cv.width, cv.height);
    ctx.putImageData(img, T.px, T.py);
    drawAxes(ymax);
    drawOverlays(span);
    renderOverview();
    report.stats.renders = (report.stats.renders || 0) + 1;
    report.stats.timeline = { columns: W, drawnColumns: drawn, bands: ncand, maxLiveBands: maxLive, ymax, view: [T.v0, T.v1], renderMs: performance.now() - t0 };
  }

  function drawAxes(ymax) {
    const r = dpr(), W = T.W, H = T.H;
    ctx.font = Math.round(11 * r) + 'px system-ui,sans-serif';
    ctx.fillStyle = '#687086'; ctx.strokeStyle = 'rgba(30,40,60,0.09)'; ctx.lineWidth = 1;
    let step = 1;
    while (ymax / step > 6) step *= 2;
    ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
    for (let v = 0; v <= ymax; v += step) {
      const y = Math.round(T.py + H - v * T.k) + 0.5;
      ctx.beginPath(); ctx.moveTo(T.px, y); ctx.lineTo(T.px + W, y); ctx.stroke();
      ctx.fillText(fmtBytes(v, true), T.px - 6 * r, y);
    }
    ctx.textAlign = 'center'; ctx.textBaseline = 'top';
    const spanX = T.v1 - T.v0, xs = Math.max(T.mode === 'event' ? 1 : 1e-3, niceStep(spanX / Math.max(2, W / (110 * r))));
    for (let x = Math.ceil(T.v0 / xs) * xs; x <= T.v1; x += xs) {
      const p = Math.round(toPx(x)) + 0.5;
      ctx.beginPath(); ctx.moveTo(p, T.py + H); ctx.lineTo(p, T.py + H + 4 * r); ctx.stroke();
      ctx.fillText(T.mode === 'event' ? fmtCount(dev.ev ? dev.ev[clamp(Math.round(x), 0, E)] : x) : fmtDurAxis(x), p, T.py + H + 7 * r);
    }
    ctx.textAlign = 'left';
    ctx.fillText(T.mode === 'event' ? 'event' : 'time since first event', T.px, T.py + H + 18 * r);
    ctx.strokeStyle = '#c4cad6';
    ctx.strokeRect(T.px - 0.5, T.py - 0.5, W + 1, H + 1);
  }

  function drawOverlays(span) {
    const r = dpr(), W = T.W, H = T.H, d0 = domain()[0];
    ctx.save();
    ctx.beginPath(); ctx.rect(T.px, T.py - 22 * r - dev.laneRows * 11 * r, W, H + 22 * r + dev.laneRows * 11 * r); ctx.clip();
    // reserved bytes: a step line
    if (T.showReserved && span.hi >= 0) {
      ctx.strokeStyle = '#1e2943'; ctx.lineWidth = 1.5 * r; ctx.setLineDash([5 * r, 3 * r]);
      ctx.beginPath();
      let y = T.py + H - reservedAt(dev, span.lo) * T.k;
      ctx.moveTo(T.px, y);
      for (let j = upperBound(dev.rState, span.lo, dev.rState.length); j < dev.rState.length && dev.rState[j] <= span.hi; j++) {
        const x = toPx(stateBegin(dev.rState[j]));
        ctx.lineTo(x, y); y = T.py + H - dev.rVal[j] * T.k; ctx.lineTo(x, y);
      }
      ctx.lineTo(T.px + W, y); ctx.stroke(); ctx.setLineDash([]);
    }
    // annotations lane
    const laneY = T.py - (dev.laneRows * 11 + 4) * r, lanePx = [];
    for (const a of dev.ranges) {
      const x0 = toPx(Math.max(xOfTime(a.t0), d0)), x1 = toPx(xOfTime(a.t1));
      if (x1 >= T.px && x0 <= T.px + W) lanePx.push([a, x0, x1]);
    }
    const dense = lanePx.length > W / (6 * r);
    for (const [a, x0, x1r] of lanePx) {
      if (dense && x1r - x0 < 2 * r) continue;
      const x1 = Math.max(x0 + 2 * r, x1r);
      const p = keyPalette(1000003 + (hashStr(a.name) % 9973));
      ctx.fillStyle = p.css; ctx.globalAlpha = 0.75;
      ctx.fillRect(x0, laneY + a.row * 11 * r, x1 - x0, 9 * r);
      ctx.globalAlpha = 1;
      if (x1 - x0 > 60 * r) {
        ctx.fillStyle = '#fff'; ctx.font = Math.round(9.5 * r) + 'px system-ui,sans-serif'; ctx.textBaseline = 'top'; ctx.textAlign = 'left';
        ctx.fillText(a.name.slice(0, Math.floor((x1 - x0) / (6 * r))), Math.max(x0, T.px) + 3 * r, laneY + a.row * 11 * r);
      }
    }
    // out-of-memory events
    ctx.fillStyle = '#d6336c';
    for (const e of dev.ooms) {
      const x = toPx(stateBegin(e + 1));
      if (x < T.px || x > T.px + W) continue;
      ctx.beginPath(); ctx.moveTo(x - 5 * r, T.py); ctx.lineTo(x + 5 * r, T.py); ctx.lineTo(x, T.py + 8 * r); ctx.fill();
    }
    marker(dev.peak, '#d6336c', 'peak ' + fmtBytes(total[dev.peak]), true);
    if (T.selected !== dev.peak) marker(T.selected, '#2f6fde', fmtBytes(total[T.selected]), false);
    ctx.restore();
  }
  function marker(s, color, label, top) {
    const r = dpr(), x = Math.round(toPx(stateBegin(s))) + 0.5;
    if (x < T.px || x > T.px + T.W) return;
    ctx.strokeStyle = color; ctx.lineWidth = 1.2 * r; ctx.setLineDash([4 * r, 3 * r]);
    ctx.beginPath(); ctx.moveTo(x, T.py); ctx.lineTo(x, T.py + T.H); ctx.stroke(); ctx.setLineDash([]);
    ctx.font = 'bold ' + Math.round(11 * r) + 'px system-ui,sans-serif'; ctx.textBaseline = 'bottom';
    const w = ctx.measureText(label).width, right = x + 4 * r + w < T.px + T.W;
    ctx.textAlign = right ? 'left' : 'right';
    // the peak's label sits above the lanes, the selected instant's just inside the plot
    const y = top ? T.py - 3 * r - dev.laneRows * 11 * r : T.py + 15 * r;
    ctx.fillStyle = color; ctx.fillText(label, right ? x + 4 * r : x - 4 * r, y);
  }
  function hashStr(s) { let h = 2166136261; for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } return h >>> 0; }

  function renderOverview() {
    const r = dpr(), W = T.oW, H = T.oH, [d0, d1] = domain();
    if (!T.ovCache) {
      const samp = new Int32Array(W), tot = new Float64Array(W);
      const sp = sampleColumns(W, d0, d1, samp, tot);
      let ymax = sp.ymax;
      if (sp.hi >= 0) ymax = Math.max(ymax, reservedMax(dev, sp.lo, sp.hi));
      T.ovCache = { tot, ymax: ymax > 0 ? ymax * 1.05 : 1, samp };
    }
    const c = T.ovCache;
    octx.setTransform(1, 0, 0, 1, 0, 0);
    octx.fillStyle = '#fff'; octx.fillRect(0, 0, ov.width, ov.height);
    octx.fillStyle = '#f6f8fb'; octx.fillRect(T.ox, T.oy, W, H);
    octx.beginPath(); octx.moveTo(T.ox, T.oy + H);
    for (let x = 0; x < W; x++) octx.lineTo(T.ox + x + 0.5, T.oy + H - c.tot[x] / c.ymax * H);
    octx.lineTo(T.ox + W, T.oy + H); octx.closePath();
    octx.fillStyle = '#9db4e6'; octx.fill();
    if (T.showReserved && dev.rState.length + dev.rStart > 0) {
      octx.strokeStyle = '#1e2943'; octx.lineWidth = r; octx.beginPath();
      for (let x = 0; x < W; x++) {
        const s = c.samp[x] < 0 ? (x ? E : 0) : c.samp[x], y = T.oy + H - reservedAt(dev, s) / c.ymax * H;
        if (x) octx.lineTo(T.ox + x, y); else octx.moveTo(T.ox, y);
      }
      octx.stroke();
    }
    const a = T.ox + (T.v0 - d0) / (d1 - d0) * W, b = T.ox + (T.v1 - d0) / (d1 - d0) * W;
    octx.fillStyle = 'rgba(30,41,67,0.12)';
    octx.fillRect(T.ox, T.oy, a - T.ox, H); octx.fillRect(b, T.oy, T.ox + W - b, H);
    octx.strokeStyle = '#2f6fde'; octx.lineWidth = 1.5 * r; octx.strokeRect(a, T.oy + 0.5, Math.max(2, b - a), H - 1);
    const px = T.ox + (stateBegin(dev.peak) - d0) / (d1 - d0) * W;
    octx.strokeStyle = '#d6336c'; octx.lineWidth = r; octx.beginPath(); octx.moveTo(px, T.oy); octx.lineTo(px, T.oy + H); octx.stroke();
    if (T.brush) {
      octx.fillStyle = 'rgba(47,111,222,0.18)';
      octx.fillRect(Math.min(T.brush[0], T.brush[1]), T.oy, Math.abs(T.brush[1] - T.brush[0]), H);
    }
  }

  function requestRender() { if (!T.pending) { T.pending = true; requestAnimationFrame(render); } }
  function setView(a, b) {
    const [d0, d1] = domain(), full = d1 - d0;
    const minSpan = T.mode === 'event' ? Math.min(full, 24) : Math.min(full, Math.max(4, full * 1e-7));
    if (!(b - a >= minSpan)) { const c = (a + b) / 2; a = c - minSpan / 2; b = c + minSpan / 2; }
    if (b - a >= full) { a = d0; b = d1; } else {
      if (a < d0) { b += d0 - a; a = d0; }
      if (b > d1) { a -= b - d1; b = d1; }
    }
    T.v0 = a; T.v1 = b; requestRender();
  }
  function reset() { const d = domain(); setView(d[0], d[1]); }
  function zoomToPeak() {
    const [d0, d1] = domain(), s = dev.peak;
    const w = T.mode === 'event' ? Math.max(200, (d1 - d0) * 0.02) : (d1 - d0) * 0.02;
    const x = stateBegin(s);
    setView(x - w / 2, x + w / 2);
  }
  function setMode(mode) {
    if (mode === T.mode || (mode === 'time' && !(E > 1 && times[E - 1] > times[0]))) return;
    const s0 = stateAt(T.v0), s1 = stateAt(T.v1), full = T.v1 - T.v0 >= domain()[1] - domain()[0] - 1e-9;
    T.mode = mode; T.ovCache = null;
    if (full) reset(); else setView(stateBegin(s0), stateBegin(Math.min(E, s1 + 1)));
    updateButtons();
  }
  function updateButtons() {
    $('mode-time').className = T.mode === 'time' ? 'on' : '';
    $('mode-event').className = T.mode === 'event' ? 'on' : '';
    $('mode-time').disabled = !(E > 1 && times[E - 1] > times[0]);
  }

  /* ---------- hit testing ---------- */
  function pos(ev, el) { const b = el.getBoundingClientRect(), r = dpr(); return [(ev.clientX - b.left) * r, (ev.clientY - b.top) * r]; }
  function hit(x, y) {
    const r = dpr();
    const laneY = T.py - (dev.laneRows * 11 + 4) * r;
    if (y >= laneY && y < T.py - 4 * r && dev.laneRows) {
      const row = Math.floor((y - laneY) / (11 * r)), d0 = domain()[0];
      for (const a of dev.ranges) {
        if (a.row !== row) continue;
        const x0 = toPx(Math.max(xOfTime(a.t0), d0)), x1 = Math.max(x0 + 2 * r, toPx(xOfTime(a.t1)));
        if (x >= x0 - r && x <= x1 + r) return { kind: 'anno', a };
      }
      return null;
    }
    const c = Math.floor(x - T.px);
    if (!T.samp || c < 0 || c >= T.W || y < T.py || y > T.py + T.H) return null;
    const s = T.samp[c];
    if (s < 0) return null;
    const bytes = (T.py + T.H - y) / T.k, cand = T.cand;
    let cum = 0;
    for (let i = 0; i < dev.n && start[i] <= s; i++) {
      if (cand[i] && s < end[i]) { cum += size[i]; if (bytes < cum) return { kind: 'alloc', i, s }; }
    }
    if (bytes < total[s]) return { kind: 'small', s, cum };
    return { kind: 'state', s };
  }
  function tipHtml(h) {
    if (h.kind === 'anno') {
      const a = h.a;
      return '<b>' + esc(a.name) + '</b><br><span class="dim">annotation \u00b7 ' + fmtDur(a.t0) + ' \u2192 ' + fmtDur(a.t1) + ' (' + fmtDur(a.t1 - a.t0) + ')' + (a.open ? ', not ended' : '') + '</span>';
    }
    const s = h.s, head = '<div class="dim">' + esc(instantLabel(dev, s)) + ' \u00b7 active ' + fmtBytes(total[s]) + ' \u00b7 reserved ' + fmtBytes(reservedAt(dev, s)) + '</div>';
    if (h.kind === 'alloc') {
      const i = h.i, t = allocTimes(dev, i), key = keyOfStack(dev.stack[i]), lab = keyLabel(key);
      return '<b>' + fmtBytes(size[i]) + '</b> <span class="dim">(' + fmtInt(size[i]) + ' bytes)</span> at <span class="mono">' + hex(dev.addr[i]) + '</span>' +
        '<div>allocated: ' + (t.a[0] === '#' ? 'event ' : '') + esc(t.a) + '</div><div>freed: ' + (t.b[0] === '#' ? 'event ' : '') + esc(t.b) + (t.life ? ' <span class="dim">(lived ' + t.life + ')</span>' : '') + '</div>' +
        '<div>site: <b>' + esc(lab.name) + '</b> <span class="dim">' + esc(lab.loc) + '</span></div>' + head +
        '<div class="stack">' + stackHtml(dev.stack[i], 14) + '</div>';
    }
    if (h.kind === 'small' && dev.lod) {
      return '<b>smaller allocations: ' + fmtBytes(total[s] - h.cum) + ' together</b><div class="dim">summed (level of detail: the page carries the largest allocations one by one)</div>' + head;
    }
    if (h.kind === 'small') {
      let cnt = 0, bytes = 0, big = 0;
      for (let i = 0; i < dev.n && start[i] <= s; i++) if (s < end[i] && !T.cand[i]) { cnt++; bytes += size[i]; if (size[i] > big) big = size[i]; }
      return '<b>' + fmtInt(cnt) + ' small allocations</b>, ' + fmtBytes(bytes) + ' together (the largest ' + fmtBytes(big) + ')' +
        '<div class="dim">each under a pixel tall at this zoom; zoom in to separate them</div>' + head;
    }
    return head + '<div class="dim">click to list what is live here</div>';
  }

  /* ---------- interaction ----------
     Handlers are assigned (not added), and the window-level ones go through windowMouse, so a
     timeline opened for another device replaces this one's instead of adding to them. */
  let drag = null;
  cv.onmousedown = (ev) => { if (ev.button === 0) { drag = { x: ev.clientX, v0: T.v0, v1: T.v1, moved: false }; ev.preventDefault(); } };
  ov.onmousedown = (ev) => { if (ev.button === 0) { const [x] = pos(ev, ov); T.brush = [x, x]; ev.preventDefault(); } };
  windowMouse.move = (ev) => {
    if (drag) {
      const dx = (ev.clientX - drag.x) * dpr();
      if (Math.abs(dx) > 3) drag.moved = true;
      if (drag.moved) { const sh = dx / T.W * (drag.v1 - drag.v0); hideTip(); setView(drag.v0 - sh, drag.v1 - sh); }
      return;
    }
    if (T.brush) { T.brush[1] = pos(ev, ov)[0]; renderOverview(); }
  };
  windowMouse.up = (ev) => {
    if (drag) {
      if (!drag.moved) {
        const [x, y] = pos(ev, cv), h = hit(x, y);
        if (h && h.kind !== 'anno') onInstant(h.s, h.kind === 'alloc' ? h.i : -1);
      }
      drag = null;
    }
    if (T.brush) {
      const [d0, d1] = domain(), f = (p) => d0 + clamp((p - T.ox) / T.oW, 0, 1) * (d1 - d0);
      const a = Math.min(T.brush[0], T.brush[1]), b = Math.max(T.brush[0], T.brush[1]);
      T.brush = null;
      if (b - a < 4 * dpr()) { const c = f(a), w = T.v1 - T.v0; setView(c - w / 2, c + w / 2); } else setView(f(a), f(b));
    }
  };
  cv.onmousemove = (ev) => {
    if (drag) return;
    const [x, y] = pos(ev, cv), h = hit(x, y);
    if (h) showTip(tipHtml(h), ev); else hideTip();
  };
  cv.onmouseleave = hideTip;
  cv.onwheel = (ev) => {  // a property handler on an element is not passive: preventDefault works
    ev.preventDefault();
    const [x] = pos(ev, cv), f = Math.exp(clamp(ev.deltaY, -300, 300) * 0.0018);
    const xc = T.v0 + clamp((x - T.px) / T.W, 0, 1) * (T.v1 - T.v0);
    setView(xc - (xc - T.v0) * f, xc + (T.v1 - xc) * f);
  };
  cv.ondblclick = reset;

  layout(); reset(); updateButtons();
  return {
    T, render, requestRender, reset, zoomToPeak, setMode,
    relayout() { layout(); requestRender(); },
    dispose() { T.disposed = true; },
    setHighlight(key) { T.highlight = key; requestRender(); },
    setSelected(s) { T.selected = s; requestRender(); },
    setShowReserved(v) { T.showReserved = v; T.ovCache = null; requestRender(); },
  };
}
