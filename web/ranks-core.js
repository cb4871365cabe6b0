const $ = (id) => document.getElementById(id);
const page = (window.gpumemprofRanks = { state: 'loading', stats: {}, drilled: null });
function setState(s) { $('gmp-status').setAttribute('data-state', s); page.state = s; }
