// Layer 5: the offline HTML report's page -- markup, style and script -- as raw string pieces
// (each well under 64 KB, the limit some compilers put on one literal). Plain JavaScript, no
// framework, nothing fetched: html_report.hpp puts the data between kStyleAndBody and
// kScriptOpen as JSON, and the script decodes it and draws on <canvas>.
//
// Drawing stays fast on million-entry traces by level of detail: the timeline bins states into
// pixel columns (each column shows the state with the most active memory in it, so peaks never
// vanish), draws only the largest allocations of the view as bands (the rest are summed into one
// band) and writes pixels directly; hover and click recompute one column on demand.
#pragma once

#include <array>
#include <string_view>

#include "gpumemprof/config.hpp"

GPUMEMPROF_NAMESPACE_BEGIN

namespace detail::html_assets {

inline constexpr std::string_view kHead = R"GMPHTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="gpumemprof">
<title>)GMPHTML";

inline constexpr std::string_view kStyleAndBody = R"GMPHTML(</title>
<style>
:root{--bg:#f3f5f9;--card:#fff;--ink:#1c2333;--muted:#687086;--line:#e3e7ef;--accent:#2f6fde;--peak:#d6336c;
--alloc:#4c78d8;--slack:#a8c0f2;--pending:#f08c2e;--free:#e2e6ed}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
header.top{display:flex;align-items:flex-end;justify-content:space-between;gap:16px;padding:16px 24px 12px;background:#1e2943;color:#fff}
header.top h1{margin:0;font-size:20px;font-weight:600;letter-spacing:.01em}
header.top .sub{color:#b3bed6;font-size:12.5px;margin-top:3px}
header.top label{font-size:13px;color:#d5dcec}
header.top select{margin-left:6px}
main{padding:16px 24px 8px;max-width:1700px;margin:0 auto}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(205px,1fr));gap:12px;margin-bottom:16px}
.stat{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:11px 14px}
.stat .k{font-size:11.5px;color:var(--muted);text-transform:uppercase;letter-spacing:.04em}
.stat .v{font-size:22px;font-weight:650;margin-top:1px;font-variant-numeric:tabular-nums;white-space:nowrap}
.stat .d{font-size:12px;color:var(--muted);margin-top:1px}
.stat.bad .v{color:var(--peak)}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 16px;margin-bottom:16px}
.card-head{display:flex;align-items:center;justify-content:space-between;gap:12px;flex-wrap:wrap}
h2{font-size:16px;margin:0;font-weight:650}
.controls{display:flex;gap:8px;align-items:center;font-size:12.5px;color:var(--muted);flex-wrap:wrap}
button,select{font:inherit;font-size:12.5px;padding:3px 9px;border:1px solid #c8cfdc;background:#fff;border-radius:5px;color:var(--ink);cursor:pointer}
button:hover,select:hover{border-color:var(--accent)}
button.on{background:var(--accent);border-color:var(--accent);color:#fff}
.btns{display:inline-flex}
.btns button{border-radius:0;margin-left:-1px}
.btns button:first-child{border-radius:5px 0 0 5px}
.btns button:last-child{border-radius:0 5px 5px 0}
.hint{color:var(--muted);font-size:12.5px;margin:6px 0 8px}
canvas{display:block;width:100%}
#tl{height:440px;cursor:crosshair}
#ov{height:54px;margin-top:6px;cursor:ew-resize}
#segmap{cursor:crosshair}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:12px;color:var(--muted);margin-top:8px;align-items:center}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.sw.line{height:2px;width:16px;vertical-align:3px;border-radius:0}
.tbl{max-height:470px;overflow:auto;border:1px solid var(--line);border-radius:6px}
table{border-collapse:collapse;width:100%;font-size:12.5px}
th,td{text-align:left;padding:4px 8px;border-bottom:1px solid var(--line);white-space:nowrap}
th{color:var(--muted);font-weight:600;font-size:11.5px;position:sticky;top:0;background:#f8f9fc;z-index:1}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
td.site{max-width:480px;overflow:hidden;text-overflow:ellipsis}
#inst-table td.site{max-width:290px}
.loc{color:var(--muted);font-size:11.5px}
td.site .loc{color:var(--muted);margin-left:6px}
tr.row{cursor:pointer}
tr.row:hover{background:#f4f7ff}
tr.hl{background:#e8f0ff}
tr.stackrow td{white-space:normal;background:#fafbfd}
.bar{display:inline-block;height:8px;background:var(--accent);border-radius:2px;vertical-align:middle;margin-left:6px;opacity:.7}
.two{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:18px;margin-top:10px}
.two h3{font-size:13px;margin:0 0 6px;color:var(--muted);font-weight:600}
.sitebar{display:flex;align-items:center;gap:8px;font-size:12px;margin:3px 0;cursor:pointer}
.sitebar .lbl{flex:0 0 46%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.sitebar .trk{flex:1;background:#eef1f6;border-radius:3px;height:12px;overflow:hidden}
.sitebar .fil{height:100%}
.sitebar .val{flex:0 0 72px;text-align:right;font-variant-numeric:tabular-nums;color:var(--muted)}
.sub{color:var(--muted);font-size:12.5px;margin-top:4px}
.more{margin-top:8px}
.tip{position:fixed;z-index:10;pointer-events:none;background:rgba(22,28,43,.97);color:#e8edf7;padding:8px 10px;border-radius:6px;font-size:12px;line-height:1.45;max-width:620px;box-shadow:0 6px 18px rgba(0,0,0,.28);display:none}
.tip b{color:#fff}
.tip .dim{color:#9aa6bf}
.tip .stack{margin-top:5px;border-top:1px solid #3a4560;padding-top:4px}
.stack{font:11.5px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.stack .fr{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.stack .lib{opacity:.55}
.stack .user{font-weight:700}
.stack .loc{opacity:.75}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.note{background:#fff8e6;border:1px solid #f1dba4;border-radius:6px;padding:8px 12px;color:#6b5418;font-size:13px;margin:8px 0}
.err{background:#fdecef;border:1px solid #f3b6c4;color:#7d1530}
.fragbar{display:flex;height:24px;border-radius:5px;overflow:hidden;margin:12px 0 4px;border:1px solid var(--line)}
.fragbar div{height:100%;min-width:0}
.hidden{display:none!important}
footer{color:var(--muted);font-size:12px;text-align:center;padding:4px 0 24px}
@media (max-width:900px){.two{grid-template-columns:1fr}}
</style>
</head>
<body>
<header class="top">
  <div><h1 id="title">GPU memory report</h1><div class="sub" id="subtitle"></div></div>
  <label id="devpick" class="hidden">Device<select id="device"></select></label>
</header>
<main>
  <div id="loading" class="note">Loading report&hellip;</div>
  <section id="summary" class="cards"></section>
  <section class="card" id="tl-card">
    <div class="card-head">
      <h2>Active memory over time</h2>
      <div class="controls" id="tl-controls">
        <span>x axis</span><span class="btns"><button id="mode-time">time</button><button id="mode-event">events</button></span>
        <label><input type="checkbox" id="show-reserved" checked> reserved</label>
        <button id="zoom-peak">Zoom to peak</button><button id="zoom-reset">Reset zoom</button>
      </div>
    </div>
    <p class="hint" id="tl-hint">Each band is one allocation, colored by allocation site and stacked in allocation order; allocations too small to see at this zoom are summed in the gray band on top. Wheel to zoom, drag to pan, click to list what is live at an instant, double-click to reset. Drag on the strip below to pick a range.</p>
    <div id="tl-note" class="note hidden"></div>
    <div id="tl-box"><canvas id="tl"></canvas><canvas id="ov"></canvas>
    <div class="legend" id="tl-legend"></div></div>
  </section>
  <section class="card" id="inst-card">
    <div class="card-head"><h2 id="inst-title">Live at the peak</h2>
      <div class="controls"><button id="inst-peak">Show the peak</button></div></div>
    <div class="sub" id="inst-sub"></div>
    <div class="two"><div><h3>Largest live allocations</h3><div id="inst-table"></div></div>
      <div><h3>Live bytes by site</h3><div id="inst-sites"></div></div></div>
  </section>
  <section class="card" id="sites-card">
    <div class="card-head"><h2>Top allocation sites</h2>
      <div class="controls">group by <select id="site-group"><option value="op">innermost frame</option><option value="user">first frame of your code</option><option value="stack">full stack</option></select>
        sort by <select id="site-sort"><option value="peak">bytes at peak</option><option value="live">live at end</option><option value="total">total allocated</option><option value="count">allocations</option></select></div></div>
    <p class="hint">Click a row to see its stack and highlight its allocations in the timeline. A site is named by the innermost frame past the allocator and runtime plumbing (gpumemprof, the C++ standard library, PyTorch's module call machinery), or by the first frame outside libraries (site-packages, c10, ...) with <i>first frame of your code</i>.</p>
    <div id="sites-table"></div>
  </section>
  <section class="card" id="seg-card">
    <div class="card-head"><h2>Segments and fragmentation</h2><div class="controls" id="seg-controls"></div></div>
    <p class="hint">The state when the snapshot was taken: every segment (one device allocation) drawn in address order, wrapped across lines, its width proportional to its size; within it each block colored by state. A pixel that covers several blocks is split by their bytes.</p>
    <div id="fragbar" class="fragbar"></div>
    <div class="legend" id="frag-legend"></div>
    <canvas id="segmap" style="margin-top:10px"></canvas>
    <div class="sub" id="seg-sub"></div>
    <div style="margin-top:10px" id="seg-table"></div>
  </section>
</main>
<footer id="footer"></footer>
<div id="tip" class="tip"></div>
<div id="gmp-status" data-state="loading" hidden></div>
<script type="application/json" id="gmp-data">)GMPHTML";

inline constexpr std::string_view kScriptOpen = "</script>\n<script>\n";

// The page's state; then formatting (kJsFormat), data decoding, colors and the stack helpers (kJsData).
inline constexpr std::string_view kJsCore = R"GMPJS('use strict';
(function () {
const T_START = performance.now();
const $ = (id) => document.getElementById(id);
const report = (window.gpumemprofReport = { state: 'loading', timings: {}, stats: {} });
function setState(s) { $('gmp-status').setAttribute('data-state', s); report.state = s; }
)GMPJS";

// Formatting and small helpers, shared with the cross-rank page (html_ranks_assets.hpp).
inline constexpr std::string_view kJsFormat = R"GMPJS(
/* ---------- formatting ---------- */
const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
function fmtBytes(n, trim) {
  if (!isFinite(n)) return '-';
  let a = Math.abs(n), u = 0;
  while (a >= 1024 && u < UNITS.length - 1) { a /= 1024; u++; }
  let t = u === 0 ? String(Math.round(a)) : a >= 100 ? a.toFixed(0) : a >= 10 ? a.toFixed(1) : a.toFixed(2);
  if (trim && t.indexOf('.') >= 0) t = t.replace(/\.?0+$/, '');
  return (n < 0 ? '-' : '') + t + ' ' + UNITS[u];
}
function fmtInt(n) { return Math.round(n).toLocaleString('en-US'); }
function fmtCount(n) {
  const a = Math.abs(n);
  if (a >= 1e6) return (n / 1e6).toFixed(a % 1e6 === 0 ? 0 : 1) + 'M';
  if (a >= 1e3) return (n / 1e3).toFixed(a % 1e3 === 0 ? 0 : 1) + 'k';
  return String(Math.round(n));
}
function fmtDur(us) {
  const a = Math.abs(us);
  if (a < 1000) return us.toFixed(0) + ' \u00b5s';
  if (a < 1e6) return (us / 1e3).toFixed(a < 1e4 ? 2 : 1) + ' ms';
  if (a < 120e6) return (us / 1e6).toFixed(a < 1e7 ? 3 : 2) + ' s';
  return (us / 60e6).toFixed(1) + ' min';
}
function fmtDurAxis(us) { return fmtDur(us).replace(/(\.\d*?)0+ /, '$1 ').replace('. ', ' '); }
function fmtPct(x) { return isFinite(x) ? (x * 100).toFixed(x < 0.1 ? 1 : 0) + '%' : '-'; }
function hex(a) { return '0x' + a.toString(16); }
const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
function esc(s) { return String(s).replace(/[&<>"']/g, (c) => ESC[c]); }
function clamp(x, a, b) { return x < a ? a : x > b ? b : x; }
function upperBound(arr, x, n) { let lo = 0, hi = n; while (lo < hi) { const m = (lo + hi) >>> 1; if (arr[m] <= x) lo = m + 1; else hi = m; } return lo; }
function lowerBound(arr, x, n) { let lo = 0, hi = n; while (lo < hi) { const m = (lo + hi) >>> 1; if (arr[m] < x) lo = m + 1; else hi = m; } return lo; }
function dpr() { return Math.max(1, Math.min(3, window.devicePixelRatio || 1)); }
function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}
)GMPJS";

inline constexpr std::string_view kJsData = R"GMPJS(
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
      expandable: !!SG.expandable[i], stack: SG.stack[i], b0, nb, req: 0, slack: 0, pending: 0, free: 0, largestFree: 0, live: 0 };
    for (let b = b0; b < b0 + nb; b++) {
      const state = B.state[b], bs = B.size[b];
      if (state === 0) { sg.req += Math.min(B.req[b], bs); sg.slack += Math.max(0, bs - B.req[b]); sg.live++; }
      else if (state === 1) sg.pending += bs;
      else { sg.free += bs; if (bs > sg.largestFree) sg.largestFree = bs; }
    }
    segs.push(sg); b0 += nb;
  }
  segs.sort((a, b) => a.addr - b.addr);
  return { d, E, n, times, start, end, size, addr, stack, flags, total, rState, rVal, rStart: R.start, byEnd, lod: L, ev,
    peak: d.summary.peakRequestedState, sum: d.summary, ranges, laneRows: Math.min(3, rowEnd.length), segs, blocks: B, ooms: d.ooms };
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
)GMPJS";

// The active-memory timeline: level-of-detail rendering, overview strip, zoom/pan, hover.
inline constexpr std::string_view kJsTimeline = R"GMPJS(
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
)GMPJS";

// The instant inspector, the sites table and the summary cards.
inline constexpr std::string_view kJsTables = R"GMPJS(
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
    ['Segments', fmtInt(s.numSegments), fmtInt(s.numBlocks) + ' blocks \u00b7 ' + fmtInt(s.numLiveBlocks) + ' allocated'],
    ['External fragmentation', isFinite(ext) ? fmtPct(ext) : 'n/a', '1 \u2212 largest free block / free bytes \u00b7 ' + fmtBytes(s.externalFree - s.pendingFree) + ' free, largest block ' + fmtBytes(s.largestFree)],
    ['Internal fragmentation', fmtPct(intl), fmtBytes(s.internalFree) + ' of rounding slack in live blocks, share of reserved'],
    ['Trace', E ? fmtInt(s.numEvents) + ' events' : 'none', E ? 'over ' + fmtDur(s.durationUs) + (s.numDroppedEvents ? ' \u00b7 ' + fmtInt(s.numDroppedEvents) + ' older left out' : '') : 'history was not recorded'],
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
    $('inst-sub').textContent = fmtBytes(bytes) + ' in ' + fmtInt(live.length) + ' allocations \u00b7 ' + instantLabel(dev, s) +
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
)GMPJS";

// The segment map, device switching and start-up.
inline constexpr std::string_view kJsMain = R"GMPJS(
/* ---------- segments ---------- */
const C_ALLOC = pack(76, 120, 216), C_SLACK = pack(168, 192, 242), C_PEND = pack(240, 140, 46), C_FREE = pack(226, 230, 237), C_SEP = pack(255, 255, 255);
function SegmentMap(dev) {
  const cv = $('segmap'), ctx = cv.getContext('2d'), B = dev.blocks;
  let pieces = [], rowH = 0, rowStep = 0;
  function fragBar() {
    const s = dev.sum, R = s.reserved || 1;
    const parts = [['requested', s.requested, 'var(--alloc)'], ['rounding slack', s.internalFree, 'var(--slack)'],
      ['pending free', s.pendingFree, 'var(--pending)'], ['free in segments', s.externalFree - s.pendingFree, 'var(--free)']];
    $('fragbar').innerHTML = parts.map((p) => '<div title="' + esc(p[0] + ': ' + fmtBytes(p[1])) + '" style="width:' + (100 * p[1] / R).toFixed(3) + '%;background:' + p[2] + '"></div>').join('');
    $('frag-legend').innerHTML = parts.map((p) => '<span><span class="sw" style="background:' + p[2] + '"></span>' + esc(p[0]) + ' ' + fmtBytes(p[1]) + ' (' + fmtPct(p[1] / R) + ')</span>').join('') +
      '<span>reserved ' + fmtBytes(s.reserved) + ' in ' + fmtInt(s.numSegments) + ' segments</span>';
  }
  function layout() {
    const r = dpr(), segs = dev.segs;
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
    $('seg-sub').textContent = fmtInt(s.numSegments) + ' segments, ' + fmtInt(s.numBlocks) + ' blocks. Hover a segment for its blocks; a dark edge marks where a segment starts.';
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
    let html = '<b>segment <span class="mono">' + hex(s.addr) + '</span></b> \u00b7 ' + fmtBytes(s.size) + ' \u00b7 ' + (s.large ? 'large' : 'small') + ' pool \u00b7 stream ' + s.stream +
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
      h += '<tr><td class="mono">' + hex(s.addr) + '</td><td class="n">' + fmtBytes(s.size) + '</td><td>' + (s.large ? 'large' : 'small') + (s.expandable ? ', expandable' : '') + '</td><td class="n">' + s.stream +
        '</td><td class="n">' + fmtInt(s.nb) + '</td><td class="n">' + fmtBytes(s.req) + '</td><td class="n">' + fmtBytes(s.free) + '</td><td class="n">' + fmtBytes(s.largestFree) + '</td><td class="n">' + fmtBytes(s.pending) + '</td></tr>';
    }
    $('seg-table').innerHTML = h + '</tbody></table></div>';
  }
  fragBar(); table();
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
  pick.innerHTML = D.devices.map((d, i) => '<option value="' + i + '">cuda:' + d.device + ' (' + fmtInt(d.nEvents) + ' events, ' + fmtInt(d.segments.addr.length) + ' segments)</option>').join('');
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
})();
)GMPJS";

inline constexpr std::array<std::string_view, 6> kScript = {kJsCore, kJsFormat, kJsData, kJsTimeline, kJsTables, kJsMain};

inline constexpr std::string_view kTail = "\n</script>\n</body>\n</html>\n";

static_assert(kStyleAndBody.size() < 65000 && kJsCore.size() < 65000 && kJsFormat.size() < 65000 &&
                  kJsData.size() < 65000 && kJsTimeline.size() < 65000 && kJsTables.size() < 65000 &&
                  kJsMain.size() < 65000,
              "keep each literal under 64 KB");

}  // namespace detail::html_assets

GPUMEMPROF_NAMESPACE_END
