/* ---------- summary ---------- */
function renderSummary(dev) {
  const s = dev.sum, E = dev.E;
  let liveEnd = dev.lod ? dev.lod.liveAtEnd : 0;
  if (!dev.lod) for (let i = 0; i < dev.n; i++) if (dev.end[i] > E) liveEnd++;
  const ext = s.extFrag >= 0 ? s.extFrag : NaN;  // 1 - largest free block / free bytes (n/a: nothing free or live)
  const intl = s.reserved ? s.internalFree / s.reserved : NaN;  // as the text summary: share of reserved
  const cards = [
    ['Peak requested', fmtBytes(s.peakRequested), (E ? instantLabel(dev, s.peakRequestedState) + ' \u00b7 ' : 'live blocks in the snapshot \u00b7 ') + 'requested bytes until the free completes, as PyTorch\'s requested_bytes, summary, diff and Perfetto'],
    ['Peak reserved', fmtBytes(s.peakReserved), 'reserved at the snapshot: ' + fmtBytes(s.reserved)],
    ['Peak allocated', s.peakAllocated >= 0 ? fmtBytes(s.peakAllocated) : 'n/a', (s.peakAllocated >= 0 ? fmtInt(s.peakAllocated) + ' bytes: ' : '') + 'block bytes, as max_memory_allocated (the blocks the trace recorded)'],
    ['Peak requested in use (pending frees left out)', fmtBytes(s.peakRequestedInUse), 'requested bytes until the free is requested, as torch.profiler\'s memory timeline and gpumemprof timeline'],
    ['Allocations', fmtInt(E ? s.numAllocs : s.numLiveBlocks), E ? fmtInt(s.numFrees) + ' frees \u00b7 ' + fmtInt(liveEnd) + ' live at the end' : 'live blocks (no trace recorded)'],
    ['Segments', fmtInt(s.numSegments), plural(s.numBlocks, 'block') + ' \u00b7 ' + fmtInt(s.numLiveBlocks) + ' allocated'],
    ['External fragmentation', isFinite(ext) ? fmtPct(ext) : 'n/a', '1 \u2212 largest free block / free bytes \u00b7 ' + fmtBytes(s.externalFree - s.pendingFree) + ' free, largest block ' + fmtBytes(s.largestFree)],
    ['Internal fragmentation', fmtPct(intl), fmtBytes(s.internalFree) + ' of rounding slack in live blocks, share of reserved'],
    ['Trace', E ? plural(s.numEvents, 'event') : 'none', E ? 'over ' + fmtDur(s.durationUs) + (s.numDroppedEvents ? ' \u00b7 ' + fmtInt(s.numDroppedEvents) + ' older left out' : '') : 'history was not recorded'],
  ];
  if (s.numOoms) cards.push(['Out of memory', fmtInt(s.numOoms), 'OOM events in the trace (red marks on the timeline)', 'bad']);
  $('summary').innerHTML = cards.map((c) => '<div class="stat ' + (c[3] || '') + '"><div class="k">' + esc(c[0]) + '</div><div class="v">' + esc(c[1]) +
    '</div><div class="d">' + esc(c[2]) + '</div></div>').join('');
}

/* ---------- what is live at an instant ---------- */
function Inspector(dev, hooks) {
  let shown = 30, cur = 0, focus = -1;
  function show(s, focusAlloc) {
    cur = s; focus = focusAlloc === undefined ? -1 : focusAlloc; shown = 30;
    draw();
  }
  function draw() {
    const s = cur, E = dev.E, start = dev.start, end = dev.end, size = dev.size, live = [];
    for (let i = 0; i < dev.n; i++) if (start[i] <= s && s < end[i]) live.push(i);
    live.sort((a, b) => size[b] - size[a] || a - b);
    let bytes = 0;
    for (const i of live) bytes += size[i];
    $('inst-title').textContent = E === 0 ? 'Live allocations in the snapshot' : s === dev.peak ? 'Live at the peak' : 'Live at the selected instant';
    $('inst-peak').classList.toggle('hidden', E === 0 || s === dev.peak);
    $('inst-sub').textContent = fmtBytes(bytes) + ' in ' + plural(live.length, 'allocation') + ' \u00b7 ' + instantLabel(dev, s) +
      (E ? ' \u00b7 reserved ' + fmtBytes(reservedAt(dev, s)) : '') +
      (dev.lod && dev.lod.hidden && bytes < dev.total[s] ? ' \u00b7 level of detail: ' + fmtBytes(dev.total[s] - bytes) + ' more in allocations the page does not list' : '');
    const rows = live.slice(0, shown);
    if (focus >= 0 && live.indexOf(focus) >= shown) rows.unshift(focus);
    const STATE = ['allocated', 'pending free'];
    let h = '<div class="tbl"><table><thead><tr><th class="n">size</th><th>address</th><th>site</th>' +
      (E ? '<th>allocated</th><th>freed</th>' : '<th>state</th>') + '</tr></thead><tbody>';
    for (const i of rows) {
      const key = keyOfStack(dev.stack[i]), lab = keyLabel(key), t = allocTimes(dev, i), pal = keyPalette(key);
      h += '<tr class="row' + (i === focus ? ' hl' : '') + '" data-key="' + key + '"><td class="n">' + fmtBytes(size[i]) + '</td><td class="mono">' + hex(dev.addr[i]) +
        '</td><td class="site" title="' + esc(lab.full + ' ' + lab.loc) + '"><span class="sw" style="background:' + pal.css + '"></span>' + esc(lab.name) +
        '<span class="loc">' + esc(lab.loc) + '</span></td>' +
        (E ? '<td>' + esc(t.a) + '</td><td>' + esc(t.b) + '</td>' : '<td>' + STATE[(dev.flags[i] & 4) ? 1 : 0] + '</td>') + '</tr>';
    }
    h += '</tbody></table></div>';
    const left = live.length - shown;
    if (left > 0) h += '<button class="more" id="inst-more">show ' + (left > 200 ? '200 more (' + fmtInt(left) + ' not shown)' : 'the other ' + fmtInt(left)) + '</button>';
    if (!live.length) h = '<div class="sub">Nothing is live here.</div>';
    $('inst-table').innerHTML = h;
    const more = $('inst-more');
    if (more) more.onclick = () => { shown += 200; draw(); };
    for (const tr of $('inst-table').querySelectorAll('tr.row')) tr.onclick = () => hooks.highlight(+tr.dataset.key);
    // by site
    const by = new Map();
    for (const i of live) { const key = keyOfStack(dev.stack[i]); by.set(key, (by.get(key) || 0) + size[i]); }
    const top = [...by.entries()].sort((a, b) => b[1] - a[1]).slice(0, 14);
    const max = top.length ? top[0][1] : 1;
    $('inst-sites').innerHTML = top.map(([key, v]) => {
      const lab = keyLabel(key), pal = keyPalette(key);
      return '<div class="sitebar" data-key="' + key + '" title="' + esc(lab.full + ' ' + lab.loc) + '"><span class="lbl">' + esc(lab.name) + ' <span class="loc">' + esc(lab.loc) + '</span></span><span class="trk"><span class="fil" style="display:block;width:' +
        (100 * v / max).toFixed(1) + '%;background:' + pal.css + '"></span></span><span class="val">' + fmtBytes(v) + '</span></div>';
    }).join('') || '<div class="sub">-</div>';
    for (const el of $('inst-sites').querySelectorAll('.sitebar')) el.onclick = () => hooks.highlight(+el.dataset.key);
  }
  return { show, redraw: draw, get current() { return cur; } };
}

/* ---------- top allocation sites ---------- */
function SitesTable(dev, hooks) {
  let rows = [], showAll = false, open = null;
  function compute() {
    const m = new Map(), P = dev.peak, E = dev.E, L = dev.lod;
    if (L) {  // level of detail: per-stack figures over every allocation, from the report
      const S = L.sites;
      for (let j = 0; j < S.stack.length; j++) {
        const st = S.stack[j], key = keyOfStack(st);
        let r = m.get(key);
        if (!r) { r = { key, st, count: 0, total: 0, live: 0, peak: 0, largest: 0 }; m.set(key, r); }
        r.count += S.count[j]; r.total += S.total[j]; r.live += S.live[j]; r.peak += S.peak[j];
        if (S.largest[j] > r.largest) r.largest = S.largest[j];
      }
    }
    for (let i = 0; i < dev.n && !L; i++) {
      const st = dev.stack[i], key = keyOfStack(st);
      let r = m.get(key);
      if (!r) { r = { key, st, count: 0, total: 0, live: 0, peak: 0, largest: 0 }; m.set(key, r); }
      const sz = dev.size[i];
      r.count++; r.total += sz;
      if (dev.end[i] > E) r.live += sz;
      if (dev.start[i] <= P && P < dev.end[i]) r.peak += sz;
      if (sz > r.largest) r.largest = sz;
    }
    rows = [...m.values()];
    draw();
  }
  function draw() {
    const by = $('site-sort').value;
    rows.sort((a, b) => b[by] - a[by] || b.total - a.total);
    const lim = showAll ? rows.length : Math.min(rows.length, 25);
    const max = rows.length ? Math.max(1, rows[0][by]) : 1;
    let h = '<div class="tbl"><table><thead><tr><th>site</th><th class="n">allocations</th><th class="n">total allocated</th><th class="n">at peak</th><th class="n">live at end</th><th class="n">largest</th></tr></thead><tbody>';
    for (let j = 0; j < lim; j++) {
      const r = rows[j], lab = keyLabel(r.key), pal = keyPalette(r.key), hl = hooks.highlighted() === r.key;
      const barW = Math.round(60 * r[by] / max);
      h += '<tr class="row' + (hl ? ' hl' : '') + '" data-j="' + j + '"><td class="site" title="' + esc(lab.full + ' ' + lab.loc) + '"><span class="sw" style="background:' + pal.css + '"></span>' + esc(lab.name) +
        '<span class="loc">' + esc(lab.loc) + '</span></td><td class="n">' + fmtInt(r.count) + '</td><td class="n">' + fmtBytes(r.total) + '</td><td class="n">' + fmtBytes(r.peak) +
        (by === 'peak' ? '<span class="bar" style="width:' + barW + 'px"></span>' : '') + '</td><td class="n">' + fmtBytes(r.live) + (by === 'live' ? '<span class="bar" style="width:' + barW + 'px"></span>' : '') +
        '</td><td class="n">' + fmtBytes(r.largest) + '</td></tr>';
      if (open === r.key) h += '<tr class="stackrow"><td colspan="6">' + stackHtml(keyExampleStack(r.key, r.st), 40) + '</td></tr>';
    }
    h += '</tbody></table></div>';
    if (rows.length > lim) h += '<button class="more" id="sites-more">show all ' + fmtInt(rows.length) + ' sites</button>';
    if (!rows.length) h = '<div class="sub">No allocations.</div>';
    $('sites-table').innerHTML = h;
    const more = $('sites-more');
    if (more) more.onclick = () => { showAll = true; draw(); };
    for (const tr of $('sites-table').querySelectorAll('tr.row')) {
      tr.onclick = () => {
        const r = rows[+tr.dataset.j];
        open = open === r.key ? null : r.key;
        hooks.highlight(open);
      };
    }
  }
  $('site-sort').onchange = draw;
  return { compute, draw };
}
