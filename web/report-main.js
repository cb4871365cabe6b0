/* ---------- segments ---------- */
const C_ALLOC = pack(76, 120, 216), C_SLACK = pack(168, 192, 242), C_PEND = pack(240, 140, 46), C_FREE = pack(226, 230, 237), C_SEP = pack(255, 255, 255);
function SegmentMap(dev) {
  const cv = $('segmap'), ctx = cv.getContext('2d'), B = dev.blocks;
  let pieces = [], rowH = 0, rowStep = 0, poolShown = '';  // poolShown: one pool's segments ('' = all)
  const shownSegs = () => (poolShown ? dev.segs.filter((s) => poolName(s.pool) === poolShown) : dev.segs);
  function fragBar() {
    const s = dev.sum, R = s.reserved || 1;
    const parts = [['requested', s.requested, 'var(--alloc)'], ['rounding slack', s.internalFree, 'var(--slack)'],
      ['pending free', s.pendingFree, 'var(--pending)'], ['free in segments', s.externalFree - s.pendingFree, 'var(--free)']];
    $('fragbar').innerHTML = parts.map((p) => '<div title="' + esc(p[0] + ': ' + fmtBytes(p[1])) + '" style="width:' + (100 * p[1] / R).toFixed(3) + '%;background:' + p[2] + '"></div>').join('');
    $('frag-legend').innerHTML = parts.map((p) => '<span><span class="sw" style="background:' + p[2] + '"></span>' + esc(p[0]) + ' ' + fmtBytes(p[1]) + ' (' + fmtPct(p[1] / R) + ')</span>').join('') +
      '<span>reserved ' + fmtBytes(s.reserved) + ' in ' + plural(s.numSegments, 'segment') + '</span>';
  }
  function layout() {
    const r = dpr(), segs = shownSegs();
    cv.width = Math.max(200, Math.round(cv.clientWidth * r));
    const W = cv.width, gap = Math.round(3 * r);
    rowH = Math.round(22 * r); rowStep = rowH + Math.round(7 * r);
    pieces = [];
    if (!segs.length) { cv.height = 0; cv.style.height = '0px'; return; }
    let total = 0, minSize = Infinity;
    for (const s of segs) { total += s.size; if (s.size < minSize) minSize = s.size; }
    const rows = clamp(Math.ceil(total / (W * Math.max(1, minSize) / (8 * r))), 1, 36);
    const usable = Math.max(W * rows - segs.length * gap, W * rows * 0.5), bpp = total / usable;
    let x = 0, row = 0;
    for (const s of segs) {
      const w = Math.max(Math.round(2 * r), Math.round(s.size / bpp)), sbpp = s.size / w;
      let done = 0;
      while (done < w) {
        if (x >= W) { row++; x = 0; }
        const take = Math.min(w - done, W - x);
        pieces.push({ s, row, x, w: take, px0: done, sbpp });
        x += take; done += take;
      }
      x += gap;
      if (x >= W) { row++; x = 0; }
    }
    const nrows = pieces.length ? pieces[pieces.length - 1].row + 1 : 0;
    cv.height = nrows * rowStep;
    cv.style.height = (cv.height / r) + 'px';
  }
  function render() {
    layout();
    if (!pieces.length) { $('seg-sub').textContent = 'No segments in this snapshot.'; return; }
    const W = cv.width, H = cv.height, img = ctx.createImageData(W, H), buf = new Uint32Array(img.data.buffer);
    buf.fill(WHITE);
    const off = B.off, bsz = B.size, req = B.req, state = B.state;
    for (const p of pieces) {
      const s = p.s, y0 = p.row * rowStep;
      let j = s.b0;
      const jEnd = s.b0 + s.nb;
      for (let c = 0; c < p.w; c++) {
        const lo = (p.px0 + c) * p.sbpp, hi = lo + p.sbpp;
        let a = 0, sl = 0, pe = 0, sep = false;
        while (j < jEnd && off[j] + bsz[j] <= lo) j++;
        for (let q = j; q < jEnd && off[q] < hi; q++) {
          const b0 = off[q], b1 = b0 + bsz[q], ov0 = Math.max(lo, b0), ov1 = Math.min(hi, b1);
          if (ov1 <= ov0) continue;
          if (b0 > lo && b0 < hi && bsz[q] > 3 * p.sbpp && q > s.b0) sep = true;
          if (state[q] === 0) {
            const r1 = b0 + Math.min(req[q], bsz[q]);
            const inReq = Math.max(0, Math.min(ov1, r1) - ov0);
            a += inReq; sl += (ov1 - ov0) - inReq;
          } else if (state[q] === 1) pe += ov1 - ov0;
        }
        const x = p.x + c, span = hi - lo;
        let y = y0 + rowH - 1;
        const fill = (bytes, color) => {
          const n = Math.round(bytes / span * rowH);
          for (let k = 0; k < n && y >= y0; k++, y--) buf[y * W + x] = color;
        };
        if (sep) { for (let k = y0; k < y0 + rowH; k++) buf[k * W + x] = C_SEP; continue; }
        fill(a, C_ALLOC); fill(sl, C_SLACK); fill(pe, C_PEND);
        for (; y >= y0; y--) buf[y * W + x] = C_FREE;
      }
    }
    ctx.putImageData(img, 0, 0);
    ctx.strokeStyle = '#8d97aa'; ctx.lineWidth = 1;
    for (const p of pieces) {
      const y0 = p.row * rowStep;
      ctx.strokeRect(p.x + 0.5, y0 + 0.5, Math.max(1, p.w - 1), rowH - 1);
      if (p.px0 === 0) { ctx.fillStyle = '#1e2943'; ctx.fillRect(p.x, y0, Math.max(1, Math.round(dpr())), rowH); }
    }
    const s = dev.sum;
    const shown = poolShown ? shownSegs() : null;
    $('seg-sub').textContent = (shown ? plural(shown.length, 'segment') + ' of pool ' + poolShown + ' (of ' + s.numSegments + ' in all)' : plural(s.numSegments, 'segment') + ', ' + plural(s.numBlocks, 'block')) + '. Hover a segment for its blocks; a dark edge marks where a segment starts.';
    report.stats.segments = { pieces: pieces.length, rows: cv.height / rowStep };
  }
  function hitAt(ev) {
    const b = cv.getBoundingClientRect(), r = dpr(), x = (ev.clientX - b.left) * r, y = (ev.clientY - b.top) * r;
    const row = Math.floor(y / rowStep);
    if (y - row * rowStep > rowH) return null;
    for (const p of pieces) {
      if (p.row === row && x >= p.x && x < p.x + p.w) {
        const s = p.s, lo = (p.px0 + (x - p.x)) * p.sbpp, hi = lo + p.sbpp, offs = B.off;
        // the block holding byte `lo`: the last one of the segment starting at or before it
        let a = s.b0, b = s.b0 + s.nb;
        while (a < b) { const mid = (a + b) >>> 1; if (offs[mid] <= lo) a = mid + 1; else b = mid; }
        const q = Math.max(s.b0, a - 1);
        let count = 0;
        for (let k = q; k < s.b0 + s.nb && offs[k] < hi; k++) count++;
        return { s, q, count: Math.max(1, count) };
      }
    }
    return null;
  }
  const STATE = ['allocated', 'pending free', 'free (inactive)'];
  cv.onmousemove = (ev) => {
    const h = hitAt(ev);
    if (!h) { hideTip(); return; }
    const s = h.s, q = h.q;
    let html = '<b>segment <span class="mono">' + hex(s.addr) + '</span></b> \u00b7 ' + fmtBytes(s.size) + ' \u00b7 ' + (s.large ? 'large' : 'small') + ' \u00b7 pool ' + poolName(s.pool) + ' ' + poolKind(s.pool) + ' \u00b7 stream ' + s.stream +
      (s.expandable ? ' \u00b7 expandable' : '') + '<div class="dim">' + fmtInt(s.nb) + (s.nb === 1 ? ' block: ' : ' blocks: ') + fmtBytes(s.req) + ' requested, ' + fmtBytes(s.slack) + ' slack, ' +
      fmtBytes(s.pending) + ' pending free, ' + fmtBytes(s.free) + ' free (largest ' + fmtBytes(s.largestFree) + ')</div>';
    if (q < s.b0 + s.nb) {
      html += '<div style="margin-top:4px">block <span class="mono">' + hex(s.addr + B.off[q]) + '</span>: <b>' + fmtBytes(B.size[q]) + '</b> ' + STATE[B.state[q]] +
        (B.state[q] !== 2 ? ', requested ' + fmtBytes(B.req[q]) : '') + (h.count > 1 ? ' <span class="dim">(this pixel spans ' + fmtInt(h.count) + ' blocks)</span>' : '') + '</div>';
      const st = B.stack[q] >= 0 ? B.stack[q] : s.stack;
      if (st >= 0) html += '<div class="stack">' + stackHtml(st, 12) + '</div>';
    }
    showTip(html, ev);
  };
  cv.onmouseleave = hideTip;
  function table() {
    const segs = dev.segs.slice().sort((a, b) => (b.free + b.pending) - (a.free + a.pending) || b.size - a.size).slice(0, 12);
    if (!segs.length) { $('seg-table').innerHTML = ''; return; }
    let h = '<h3 style="font-size:13px;margin:6px 0;color:var(--muted)">Segments with the most unused bytes</h3><div class="tbl"><table><thead><tr><th>address</th><th class="n">size</th><th>pool</th><th class="n">stream</th><th class="n">blocks</th><th class="n">requested</th><th class="n">free</th><th class="n">largest free</th><th class="n">pending free</th></tr></thead><tbody>';
    for (const s of segs) {
      h += '<tr><td class="mono">' + hex(s.addr) + '</td><td class="n">' + fmtBytes(s.size) + '</td><td>' + poolName(s.pool) + ' ' + poolKind(s.pool) + ', ' + (s.large ? 'large' : 'small') + (s.expandable ? ', expandable' : '') + '</td><td class="n">' + s.stream +
        '</td><td class="n">' + fmtInt(s.nb) + '</td><td class="n">' + fmtBytes(s.req) + '</td><td class="n">' + fmtBytes(s.free) + '</td><td class="n">' + fmtBytes(s.largestFree) + '</td><td class="n">' + fmtBytes(s.pending) + '</td></tr>';
    }
    $('seg-table').innerHTML = h + '</tbody></table></div>';
  }
  // Bytes per pool (segment_pool_id), when any segment is in a private pool (a graph's or a MemPool's).
  function pools() {
    const rows = poolUsage(dev.segs);
    if (!rows.length || (rows.length === 1 && poolKind(rows[0].pool) === 'default')) { $('pool-table').innerHTML = $('seg-controls').innerHTML = ''; return; }
    // The map shows every pool's segments, or one pool's.
    $('seg-controls').innerHTML = 'pool <select id="seg-pool"><option value="">all</option>' +
      rows.map((u) => '<option value="' + esc(poolName(u.pool)) + '">' + esc(poolName(u.pool) + ' ' + poolKind(u.pool)) + '</option>').join('') + '</select>';
    $('seg-pool').onchange = (ev) => { poolShown = ev.target.value; render(); };
    let h = '<h3 style="font-size:13px;margin:6px 0;color:var(--muted)">Memory by pool</h3><div class="tbl"><table><thead><tr><th>pool</th><th>kind</th><th class="n">segments</th><th class="n">reserved</th><th class="n">allocated</th><th class="n">requested</th><th class="n">pending free</th><th class="n">free</th></tr></thead><tbody>';
    for (const u of rows) {
      h += '<tr><td class="mono">' + poolName(u.pool) + '</td><td>' + poolKind(u.pool) + '</td><td class="n">' + fmtInt(u.segments) + '</td><td class="n">' + fmtBytes(u.reserved) + '</td><td class="n">' + fmtBytes(u.allocated) +
        '</td><td class="n">' + fmtBytes(u.requested) + '</td><td class="n">' + fmtBytes(u.pending) + '</td><td class="n">' + fmtBytes(u.free) + '</td></tr>';
    }
    $('pool-table').innerHTML = h + '</tbody></table></div>';
  }
  fragBar(); table(); pools();
  return { render };
}

/* ---------- one device's page ---------- */
let current = null;
function openDevice(idx) {
  const t0 = performance.now();
  if (current && current.tl) current.tl.dispose();
  windowMouse.move = windowMouse.up = null;
  const dev = decodeDevice(D.devices[idx]);
  const decodeMs = performance.now() - t0;
  rankKeys(dev);
  let highlighted = null, tl = null;
  const hooks = {
    highlight(key) {
      highlighted = highlighted === key ? null : key;
      if (key === null) highlighted = null;
      if (tl) tl.setHighlight(highlighted);
      sites.draw();
    },
    highlighted: () => highlighted,
  };
  const sites = SitesTable(dev, hooks);
  const insp = Inspector(dev, hooks);
  renderSummary(dev);
  const hasTrace = dev.E > 0;
  $('tl-box').classList.toggle('hidden', !hasTrace);
  $('tl-controls').classList.toggle('hidden', !hasTrace);
  $('tl-hint').classList.toggle('hidden', !hasTrace);
  const note = $('tl-note'), s = dev.sum, L = dev.lod;
  const idle = hasTrace && s.openOnEvents && s.activeSlices > 0;  // opened on events: say why
  note.classList.toggle('hidden', hasTrace && dev.n > 0 && !idle && !L);
  note.textContent = !hasTrace ? 'This snapshot has no allocation history (record_memory_history was off), so there is no timeline; the views below use the segments.'
    : dev.n === 0 ? 'The trace has no allocations of this device; only reserved memory is drawn.'
    : (idle ? 'Opened on the events axis (one step per event): the events fall in ' + s.activeSlices + ' of 100 equal slices of the ' +
        fmtDur(s.durationUs) + ' the trace spans, so wall-clock time is mostly idle. The time button shows it to scale. ' : '') +
      (L ? 'Level of detail: ' + (L.ev ? fmtInt(L.events) + ' events are drawn as ' + fmtInt(dev.E) + ' instants, the most active of each run of events; ' : '') +
        (L.hidden ? fmtInt(dev.n) + ' of ' + fmtInt(L.allocations) + ' allocations are drawn one by one (all those live at the peak, then those covering the most memory over time), the others summed in gray; ' : '') +
        'peaks, totals and the sites table count every event. To see each of the newest N events, write a report with --max-entries N.' : '');
  for (const id of ['mode-time', 'mode-event', 'show-reserved', 'zoom-peak', 'zoom-reset']) $(id).disabled = !hasTrace;
  if (hasTrace) {
    tl = Timeline(dev, (s, i) => { insp.show(s, i); tl.setSelected(s); });
    $('mode-time').onclick = () => tl.setMode('time');
    $('mode-event').onclick = () => tl.setMode('event');
    $('zoom-peak').onclick = () => tl.zoomToPeak();
    $('zoom-reset').onclick = () => tl.reset();
    $('show-reserved').onchange = (e) => tl.setShowReserved(e.target.checked);
    tl.render();
  }
  $('inst-peak').onclick = () => { insp.show(dev.peak); if (tl) tl.setSelected(dev.peak); };
  $('site-group').onchange = (e) => {
    groupMode = e.target.value; rankKeys(dev); highlighted = null;
    if (tl) tl.setHighlight(null);
    sites.compute(); insp.redraw();
  };
  insp.show(dev.peak);
  sites.compute();
  const segmap = SegmentMap(dev);
  segmap.render();
  $('tl-legend').innerHTML = '<span><span class="sw" style="background:rgb(200,206,216)"></span>smaller allocations, summed</span>' +
    '<span><span class="sw line" style="background:#1e2943"></span>reserved (segments)</span>' +
    '<span><span class="sw line" style="background:#d6336c"></span>peak requested</span>' +
    '<span><span class="sw line" style="background:#2f6fde"></span>selected instant</span>' +
    (dev.stack.some((st) => st >= 0) ? '<span>band colors: allocation sites (see the table below)</span>'
      : '<span>no stacks were recorded: band colors only tell allocations apart</span>');
  current = { dev, tl, segmap, insp };
  Object.assign(report.stats, { device: dev.d.device, events: dev.E, allocations: dev.n, segmentsCount: dev.segs.length, decodeMs });
}

function main() {
  const t0 = performance.now();
  const text = $('gmp-data').textContent;
  D = JSON.parse(text);
  report.timings.parseMs = performance.now() - t0;
  report.stats.dataBytes = text.length;
  computeSiteFrames();
  $('title').textContent = D.title;
  $('subtitle').textContent = 'generated by ' + D.generator + ' \u00b7 ' + D.devices.length + (D.devices.length === 1 ? ' device' : ' devices') +
    ' \u00b7 open offline, nothing is fetched';
  $('footer').textContent = 'gpumemprof offline memory report \u00b7 ' + D.generator;
  const pick = $('device');
  pick.innerHTML = D.devices.map((d, i) => '<option value="' + i + '">' + esc(d.name || 'cuda:' + d.device) + ' (' + plural(d.nEvents, 'event') + ', ' + plural(d.segments.addr.length, 'segment') + ')</option>').join('');
  $('devpick').classList.toggle('hidden', D.devices.length < 2);
  pick.onchange = () => openDevice(+pick.value);
  let first = 0;
  for (let i = 0; i < D.devices.length; i++) if (D.devices[i].nEvents || D.devices[i].segments.addr.length) { first = i; break; }
  pick.value = String(first);
  openDevice(first);
  let rt = 0;
  window.addEventListener('resize', () => {
    clearTimeout(rt);
    rt = setTimeout(() => { if (current) { if (current.tl) current.tl.relayout(); current.segmap.render(); } }, 120);
  });
  $('loading').classList.add('hidden');
  report.timings.totalMs = performance.now() - T_START;
  report.timings.sinceNavigationMs = performance.now();
  setState('ready');
  console.log('gpumemprof report ready in ' + report.timings.totalMs.toFixed(0) + ' ms');
}

function fail(e) {
  const box = $('loading');
  box.classList.remove('hidden'); box.classList.add('err');
  box.textContent = 'The report could not be drawn: ' + (e && e.message ? e.message : e);
  setState('error');
  console.error(e);
}
requestAnimationFrame(() => setTimeout(() => { try { main(); } catch (e) { fail(e); } }, 0));
