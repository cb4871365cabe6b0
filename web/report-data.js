/* ---------- data ---------- */
let D = null;          // the parsed JSON
let siteFrame = null;  // per grouping mode ('op', 'user'), per stack: the frame that names its site
// Plumbing: the allocator (and its PyTorch bridge), the C++ runtime, PyTorch's libraries and call
// machinery, the Python interpreter -- never a site.
const PLUMB_FILE = /(^|\/)include\/gpumemprof\/|gpumemprof_torch|(^|\/)(c\+\+|bits)\/|^\/usr\/include\/|^<frozen|^\?*$|\/torch\/lib\/|(^|\/)lib(torch|c10|python)[^\/]*$|(^|\/)python[0-9.]*$/;
const PLUMB_NAME = /^(gpumemprof::|std::|c10::|at::|torch::|__gnu_cxx::|__libc_|__cxa_|_start$|start_thread$|clone3?$|_call_impl$|_wrapped_call_impl$|__call__$|_use_grad$|wrapper$|decorate_context$|\?*$)/;
// Libraries: skipped too when looking for the first frame of the user's own code.
const LIB_FILE = /(^|\/)(site-packages|dist-packages|c10|catch2|thrust|cub)\/|^\/usr\/(lib|local\/lib)\//;
function fName(f) { return D.strings[D.frames[3 * f + 2]]; }
function fFile(f) { return D.strings[D.frames[3 * f]]; }
function fLine(f) { return D.frames[3 * f + 1]; }
function isPlumbing(f) { return PLUMB_FILE.test(fFile(f)) || PLUMB_NAME.test(fName(f)); }
function isLib(f) { return isPlumbing(f) || LIB_FILE.test(fFile(f)); }
function shortName(n) {
  if (n.length <= 48) return n;
  // collapse template arguments and parameter lists of long C++ names: f<...>(...) -> f<>(...)
  let out = '', depth = 0;
  for (let i = 0; i < n.length; i++) {
    const ch = n[i];
    if (ch === '<' || ch === '(') { if (depth === 0) out += ch === '<' ? '<\u2026' : '(\u2026'; depth++; continue; }
    if ((ch === '>' || ch === ')') && depth > 0) { depth--; if (depth === 0) out += ch; continue; }
    if (depth === 0) out += ch;
  }
  return out;
}
function shortFile(p) {
  const parts = p.split('/');
  return parts.length <= 2 ? p : '\u2026/' + parts.slice(-2).join('/');
}
function computeSiteFrames() {
  const op = new Int32Array(D.stacks.length), user = new Int32Array(D.stacks.length);
  for (let s = 0; s < D.stacks.length; s++) {
    const fr = D.stacks[s], first = fr.length ? fr[0] : -1;
    op[s] = user[s] = first;
    for (let j = 0; j < fr.length; j++) if (!isPlumbing(fr[j])) { op[s] = fr[j]; break; }
    for (let j = 0; j < fr.length; j++) if (!isLib(fr[j])) { user[s] = fr[j]; break; }
  }
  siteFrame = { op, user };
}
function stackHtml(st, max) {
  if (st < 0) return '<div class="stack dim">no stack recorded</div>';
  const fr = D.stacks[st], uf = siteFrame[groupMode === 'user' ? 'user' : 'op'][st], lim = max || 16;
  let h = '<div class="stack">';
  for (let j = 0; j < fr.length && j < lim; j++) {
    const f = fr[j], cls = f === uf ? 'fr user' : isPlumbing(f) ? 'fr lib' : 'fr';
    h += '<div class="' + cls + '">' + esc(fName(f) || '??') + ' <span class="loc">' + esc(shortFile(fFile(f))) + ':' + fLine(f) + '</span></div>';
  }
  if (fr.length > lim) h += '<div class="fr lib">\u2026 ' + (fr.length - lim) + ' more frames</div>';
  return h + '</div>';
}

/* Allocation sites: a key per allocation under the current grouping (a frame or a stack id). */
let groupMode = 'op';  // 'op': innermost frame past the plumbing, 'user': first frame of the user's code, 'stack'
function keyOfStack(st) { return st < 0 ? -1 : groupMode === 'stack' ? st : siteFrame[groupMode][st]; }
function keyLabel(key) {
  if (key < 0) return { name: '(no stack recorded)', full: '(no stack recorded)', loc: '' };
  const f = groupMode === 'stack' ? siteFrame.op[key] : key;
  if (f < 0) return { name: '(empty stack)', full: '(empty stack)', loc: '' };
  const full = fName(f) || '??';
  return { name: shortName(full) + (groupMode === 'stack' ? '  [stack ' + key + ']' : ''), full, loc: shortFile(fFile(f)) + ':' + fLine(f) };
}
function keyExampleStack(key, st) { return groupMode === 'stack' ? key : st; }

/* ---------- colors ---------- */
const LITTLE = new Uint8Array(new Uint32Array([0x0a0b0c0d]).buffer)[0] === 0x0d;
function pack(r, g, b) { return LITTLE ? ((0xff000000 | (b << 16) | (g << 8) | r) >>> 0) : (((r << 24) | (g << 16) | (b << 8) | 0xff) >>> 0); }
function hsl(h, s, l) {
  h /= 360; l = clamp(l, 0, 1);
  const q = l < 0.5 ? l * (1 + s) : l + s - l * s, p = 2 * l - q;
  const f = (t) => { if (t < 0) t += 1; if (t > 1) t -= 1; return t < 1 / 6 ? p + (q - p) * 6 * t : t < 0.5 ? q : t < 2 / 3 ? p + (q - p) * (2 / 3 - t) * 6 : p; };
  return [Math.round(f(h + 1 / 3) * 255), Math.round(f(h) * 255), Math.round(f(h - 1 / 3) * 255)];
}
const WHITE = pack(255, 255, 255);
const SMALL = pack(200, 206, 216), SMALL_EDGE = pack(176, 183, 196), SMALL_DIM = pack(229, 232, 238);
let palette = new Map(), keyRank = new Map();
// The sites that cover the most of the timeline get the most distinct hues, in this order.
const HUES = [212, 28, 140, 352, 268, 184, 46, 318, 96, 12, 238, 160];
/* Ranks the sites of the current grouping by the area they cover (bytes x states live). */
function rankKeys(dev) {
  const area = new Map();
  for (let i = 0; i < dev.n; i++) {
    const key = keyOfStack(dev.stack[i]);
    area.set(key, (area.get(key) || 0) + dev.size[i] * (dev.end[i] - dev.start[i]));
  }
  keyRank = new Map([...area.entries()].filter((e) => e[0] >= 0).sort((a, b) => b[1] - a[1]).map((e, r) => [e[0], r]));
  palette = new Map();
}
function keyPalette(key) {
  let p = palette.get(key);
  if (p) return p;
  let h, s, l;
  if (key <= -2) { h = HUES[(-key - 2) % HUES.length]; s = 0.38; l = 0.64; }  // allocations told apart, no site
  else if (key < 0) { h = 215; s = 0.16; l = 0.6; } else {
    const r = keyRank.has(key) ? keyRank.get(key) : HUES.length + key;
    h = r < HUES.length ? HUES[r] : (r * 137.508 + 205) % 360;
    s = 0.58 + 0.12 * ((r >> 1) & 1); l = r < HUES.length ? 0.56 : 0.54 + 0.1 * ((r >> 2) & 1);
    if (h > 40 && h < 75) l -= 0.08;  // keep yellows readable on white
  }
  const px = [], edge = [];
  for (let v = 0; v < 3; v++) {
    const c = hsl(h, s, l + (v - 1) * 0.07), e = hsl(h, s, l - 0.2 + (v - 1) * 0.05);
    px.push(pack(c[0], c[1], c[2])); edge.push(pack(e[0], e[1], e[2]));
  }
  const d = hsl(h, 0.12, 0.88), de = hsl(h, 0.12, 0.8), c = hsl(h, s, l);
  p = { px, edge, dim: pack(d[0], d[1], d[2]), dimEdge: pack(de[0], de[1], de[2]), css: 'rgb(' + c.join(',') + ')' };
  palette.set(key, p);
  return p;
}

/* ---------- decoding one device ---------- */
function decodeDevice(d) {
  const E = d.nEvents, times = new Float64Array(E);
  { let acc = 0; const dt = d.dt; for (let i = 0; i < E; i++) { acc += dt[i]; times[i] = acc; } }
  const A = d.alloc, n = A.size.length;
  const start = new Float64Array(n), end = new Float64Array(n), size = new Float64Array(n), addr = new Float64Array(n);
  const stack = new Int32Array(n), flags = new Uint8Array(n);
  let st = 0, ad = 0;
  for (let i = 0; i < n; i++) {
    st += A.start[i]; start[i] = st; end[i] = st + A.len[i];
    size[i] = A.size[i]; stack[i] = A.stack[i];
    ad += A.addr[i]; addr[i] = ad;
  }
  for (let i = 0; i + 1 < A.flags.length; i += 2) flags[A.flags[i]] = A.flags[i + 1];
  // Active bytes per state: a difference array, then a running sum (exact below 2^53).
  const total = new Float64Array(E + 2);
  for (let i = 0; i < n; i++) { total[start[i]] += size[i]; total[end[i]] -= size[i]; }
  { let run = 0; for (let s = 0; s <= E + 1; s++) { run += total[s]; total[s] = run; } }
  // Level of detail (html_report_lod.hpp): exact active bytes per state, and the trace state each state shows.
  const L = d.lod || null;
  let ev = null;
  if (L) {
    for (let s = 0; s <= E; s++) total[s] = L.active[s];
    total[E + 1] = 0;
    if (L.ev) { ev = new Float64Array(E + 1); let acc = 0; for (let s = 0; s <= E; s++) { acc += L.ev[s]; ev[s] = acc; } }
  }
  const R = d.reserved, nr = R.state.length, rState = new Float64Array(nr), rVal = new Float64Array(nr);
  { let r = R.start; for (let i = 0; i < nr; i++) { r += R.delta[i]; rState[i] = R.state[i]; rVal[i] = r; } }
  // Allocations in order of their end state (a counting sort: ends are small integers).
  const byEnd = new Uint32Array(n);
  {
    const count = new Uint32Array(E + 3);
    for (let i = 0; i < n; i++) count[end[i] + 1]++;
    for (let s = 1; s < E + 3; s++) count[s] += count[s - 1];
    for (let i = 0; i < n; i++) byEnd[count[end[i]]++] = i;
  }
  // Annotations: START/END pairs per name become ranges (times relative to the first event).
  const an = d.annotations, ranges = [], openBy = new Map();
  for (let i = 0; i < an.name.length; i++) {
    const name = D.strings[an.name[i]], t = an.time[i];
    if (an.start[i]) { if (!openBy.has(name)) openBy.set(name, []); openBy.get(name).push(t); continue; }
    const o = openBy.get(name);
    ranges.push({ name, t0: o && o.length ? o.pop() : (E ? times[0] : 0), t1: t, row: 0 });
  }
  for (const [name, o] of openBy) for (const t of o) ranges.push({ name, t0: t, t1: E ? times[E - 1] : t, row: 0, open: true });
  ranges.sort((a, b) => a.t0 - b.t0);
  const rowEnd = [];
  for (const r of ranges) {
    let k = 0;
    while (k < rowEnd.length && rowEnd[k] > r.t0) k++;
    if (k >= 3) k = 2;
    rowEnd[k] = Math.max(rowEnd[k] || -Infinity, r.t1); r.row = k;
  }
  // Segments, sorted by address, with per-segment block totals.
  const SG = d.segments, B = d.blocks, segs = [];
  let b0 = 0;
  for (let i = 0; i < SG.addr.length; i++) {
    const nb = SG.nblocks[i], sg = { addr: SG.addr[i], size: SG.size[i], stream: SG.stream[i], large: !!SG.large[i],
      expandable: !!SG.expandable[i], stack: SG.stack[i], b0, nb, req: 0, slack: 0, pending: 0, free: 0, largestFree: 0, live: 0,
      pool: SG.poolFirst ? [SG.poolFirst[i], SG.poolSecond[i]] : [0, 0], alloc: 0 };
    for (let b = b0; b < b0 + nb; b++) {
      const state = B.state[b], bs = B.size[b];
      if (state === 0) { sg.req += Math.min(B.req[b], bs); sg.slack += Math.max(0, bs - B.req[b]); sg.live++; sg.alloc += bs; }
      else if (state === 1) sg.pending += bs;
      else { sg.free += bs; if (bs > sg.largestFree) sg.largestFree = bs; }
    }
    segs.push(sg); b0 += nb;
  }
  segs.sort((a, b) => a.addr - b.addr);
  return { d, E, n, times, start, end, size, addr, stack, flags, total, rState, rVal, rStart: R.start, byEnd, lod: L, ev,
    peak: d.summary.peakRequestedState, sum: d.summary, ranges, laneRows: Math.min(3, rowEnd.length), segs, blocks: B, ooms: d.ooms };
}
// A pool id as PyTorch prints segment_pool_id, and what kind of pool it is.
function poolName(p) { return '(' + p[0] + ', ' + p[1] + ')'; }
function poolKind(p) { return p[0] === 0 && p[1] === 0 ? 'default' : p[0] !== 0 ? 'graph' : 'user'; }
// Per pool, in order of first segment: segments, reserved, allocated, requested, pending, free.
function poolUsage(segs) {
  const out = new Map();
  for (const s of segs) {
    const key = poolName(s.pool);
    let u = out.get(key);
    if (!u) out.set(key, u = { pool: s.pool, segments: 0, reserved: 0, allocated: 0, requested: 0, pending: 0, free: 0 });
    u.segments++; u.reserved += s.size; u.allocated += s.alloc; u.requested += s.req; u.pending += s.pending; u.free += s.free;
  }
  return [...out.values()];
}
function reservedAt(dev, s) { const k = upperBound(dev.rState, s, dev.rState.length); return k === 0 ? dev.rStart : dev.rVal[k - 1]; }
function reservedMax(dev, lo, hi) {
  let m = reservedAt(dev, lo);
  for (let k = upperBound(dev.rState, lo, dev.rState.length); k < dev.rState.length && dev.rState[k] <= hi; k++) if (dev.rVal[k] > m) m = dev.rVal[k];
  return m;
}
function evNum(dev, s) { return (dev.ev ? dev.ev[s] : s) - 1; }  // the trace entry that made state s
function instantLabel(dev, s) {
  if (dev.E === 0) return 'at the snapshot';
  if (s === 0) return 'before the first event';
  return 'after event #' + fmtInt(evNum(dev, s)) + ' (' + fmtDur(dev.times[s - 1]) + ')';
}
function allocTimes(dev, i) {
  const E = dev.E, s = dev.start[i], e = dev.end[i], f = dev.flags[i];
  const a = (f & 1) || s === 0 ? 'before the trace' : '#' + fmtInt(evNum(dev, s)) + ' \u00b7 ' + fmtDur(dev.times[s - 1]);
  let b;
  if (e > E) b = (f & 4) ? 'pending at the end' : 'live at the end';
  else b = '#' + fmtInt(evNum(dev, e)) + ' \u00b7 ' + fmtDur(dev.times[e - 1]);
  let life = '';
  if (!(f & 1) && s > 0 && e <= E) life = fmtDur(dev.times[e - 1] - dev.times[s - 1]);
  return { a, b, life };
}
