const T_START = performance.now();
const $ = (id) => document.getElementById(id);
const report = (window.gpumemprofReport = { state: 'loading', timings: {}, stats: {} });
function setState(s) { $('gmp-status').setAttribute('data-state', s); report.state = s; }
