/* ---------- formatting ---------- */
// Sizes as every other report prints them (format_size, allocator/format_size.hpp): bytes below
// 1 KiB, then KiB, MiB or GiB with two decimals ("21.75 MiB", "512 bytes"); a tie rounds to even,
// as printf's %.2f does. `trim` (axis ticks only) drops trailing zeros ("64 MiB").
const UNITS = ['bytes', 'KiB', 'MiB', 'GiB'];
function fixed2(x) {
  const s = x * 100, f = Math.floor(s), r = s - f > 0.5 || (s - f === 0.5 && f % 2 === 1) ? f + 1 : f;
  return (r / 100).toFixed(2);
}
function fmtBytes(n, trim) {
  if (!isFinite(n)) return '-';
  let a = Math.abs(n), u = 0;
  while (a >= 1024 && u < UNITS.length - 1) { a /= 1024; u++; }
  let t = u === 0 ? String(Math.round(a)) : fixed2(a);
  if (trim && t.indexOf('.') >= 0) t = t.replace(/\.?0+$/, '');
  return (n < 0 ? '-' : '') + t + ' ' + UNITS[u];
}
function plural(n, noun) { return fmtInt(n) + ' ' + noun + (n === 1 ? '' : 's'); }
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
