#!/usr/bin/env python3
"""Loads gpumemprof HTML reports in headless Chromium and checks that they work offline.

For each report: launch Chromium (its own profile, no network features), open the page over the
DevTools protocol, wait until the page marks itself ready (#gmp-status data-state="ready"),
and fail on any console error, uncaught exception, failed load, or request that leaves the file
(no CDN, no external script). Then take a full-page screenshot and check it is not blank
(enough non-white pixels, enough distinct colors) and that the timeline drew bands.

Standard library only (Python 3.8+): a small WebSocket client and a small PNG decoder.

  browser_check.py --maker PATH/html_make_report [--out DIR] [--big-events N] [--snapshot FILE]
  browser_check.py --report FILE.html ...          (check existing reports)

Exit status: 0 all good, 1 a check failed, 77 Chromium is not installed (a skip for Meson).
"""
import argparse
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib

SKIP = 77
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium():
    env = os.environ.get("CHROMIUM")
    if env:
        return env if os.path.exists(env) or shutil.which(env) else None
    if os.path.exists("/usr/bin/chromium"):
        return "/usr/bin/chromium"
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


# ---------------------------------------------------------------- WebSocket (RFC 6455) client
class WebSocket:
    def __init__(self, url, timeout):
        assert url.startswith("ws://"), url
        hostport, _, path = url[5:].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port or 80)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        req = (f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self.sock.sendall(req.encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("websocket handshake: connection closed")
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError("websocket handshake failed: " + head.decode(errors="replace"))

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ConnectionError("websocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, text):
        payload = text.encode()
        header = bytearray([0x81])
        n = len(payload)
        if n < 126:
            header.append(0x80 | n)
        elif n < 65536:
            header.append(0x80 | 126)
            header += struct.pack(">H", n)
        else:
            header.append(0x80 | 127)
            header += struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes(header) + mask + masked)

    def recv(self):
        """Returns the next text message (joins fragments, answers pings)."""
        parts = []
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if opcode == 0x9:  # ping
                self.sock.sendall(bytes([0x8A, len(data) | 0x80]) + b"\0\0\0\0" + data)
                continue
            if opcode == 0x8:
                raise ConnectionError("websocket closed by the browser")
            if opcode in (0x0, 0x1, 0x2):
                parts.append(data)
                if b0 & 0x80:
                    return b"".join(parts).decode()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class DevTools:
    """Minimal Chrome DevTools Protocol session on one page target."""

    def __init__(self, ws_url, timeout):
        self.ws = WebSocket(ws_url, timeout)
        self.next_id = 0
        self.events = []

    def call(self, method, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def evaluate(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluate {expr!r}: {r['exceptionDetails'].get('text')}")
        return r.get("result", {}).get("value")


# ---------------------------------------------------------------- PNG decoding (8-bit RGB/RGBA)
def decode_png(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width = 8, [], 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or color not in (2, 6) or interlace:
                raise ValueError(f"unsupported PNG: depth {depth} color {color} interlace {interlace}")
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xFF
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def pixel_stats(png, region=None):
    """(fraction of non-white pixels, number of distinct colors) over region (x0, y0, x1, y1)."""
    width, height, bpp, rows = decode_png(png)
    x0, y0, x1, y1 = region or (0, 0, width, height)
    x1, y1 = min(x1, width), min(y1, height)
    nonwhite, colors, total = 0, set(), 0
    for y in range(max(0, y0), y1, 2):  # every other pixel is plenty
        row = rows[y]
        for x in range(max(0, x0), x1, 2):
            px = row[x * bpp:x * bpp + 3]
            total += 1
            if px[0] < 245 or px[1] < 245 or px[2] < 245:
                nonwhite += 1
            if len(colors) < 5000:
                colors.add(px)
    return (nonwhite / total if total else 0.0), len(colors), (width, height)


# ---------------------------------------------------------------- interaction
def exercise_timeline(dt, shot_path, result):
    """Hovers, zooms and clicks the timeline like a user; returns the problems seen."""
    problems = []

    def mouse(kind, x, y, **extra):
        dt.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, **extra)

    def settle():
        dt.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        time.sleep(0.05)

    box = json.loads(dt.evaluate(
        "(function(){const c=document.getElementById('tl');window.scrollTo(0,c.getBoundingClientRect().top+window.scrollY-150);"
        "const r=c.getBoundingClientRect();return JSON.stringify([r.left,r.top,r.right,r.bottom]);})()"))
    left, top, right, bottom = box
    renders = dt.evaluate("gpumemprofReport.stats.renders")
    # hover low in the plot, where long-lived allocations are: a tooltip naming a size
    x, y = (left + right) * 0.5, bottom - 60
    mouse("mouseMoved", x, y)
    settle()
    tip = dt.evaluate("(function(){const t=document.getElementById('tip');return t.style.display==='block'?t.innerText:''})()")
    result["hover_tooltip"] = tip[:120]
    if "B" not in tip:
        problems.append(f"hovering the timeline showed no allocation tooltip ({tip!r})")
    # zoom in around the peak by wheel
    t0 = time.monotonic()
    for _ in range(4):
        mouse("mouseWheel", x, y, deltaX=0, deltaY=-300)
        settle()
    result["zoom_4_wheels_s"] = round(time.monotonic() - t0, 3)
    after = dt.evaluate("gpumemprofReport.stats.renders")
    if not after or after <= (renders or 0):
        problems.append("wheel did not re-render the timeline")
    # click: the inspector lists what is live there
    mouse("mouseMoved", x, y)
    mouse("mousePressed", x, y, button="left", clickCount=1)
    mouse("mouseReleased", x, y, button="left", clickCount=1)
    settle()
    title = dt.evaluate("document.getElementById('inst-title').textContent")
    rows = dt.evaluate("document.querySelectorAll('#inst-table tr.row').length")
    result["click"] = f"{title} ({rows} rows)"
    if not rows:
        problems.append(f"clicking the timeline listed nothing ({title!r})")
    mouse("mouseMoved", x, top + (bottom - top) * 0.55)
    settle()
    shot = dt.call("Page.captureScreenshot", format="png")
    with open(shot_path, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    result["zoomed_screenshot"] = shot_path
    result["timeline_after_zoom"] = dt.evaluate("JSON.stringify(gpumemprofReport.stats.timeline)")
    return problems


# Drives the other controls through the DOM; returns a list of what went wrong.
CONTROLS_JS = r"""
(async function () {
  const $ = (id) => document.getElementById(id), out = [];
  const frame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const change = (el, v) => { el.value = v; el.dispatchEvent(new Event('change')); };
  // the segment map's tooltip
  const sm = $('segmap'), b = sm.getBoundingClientRect();
  if (b.height > 0) {
    sm.dispatchEvent(new MouseEvent('mousemove', { clientX: b.left + 3, clientY: b.top + 8, bubbles: true }));
    if (!/segment/.test($('tip').innerText)) out.push('segment map hover shows no segment: ' + $('tip').innerText.slice(0, 80));
    sm.dispatchEvent(new MouseEvent('mouseleave'));
  }
  // a site row: expands its stack and highlights it
  const row = document.querySelector('#sites-table tr.row');
  if (row) { row.click(); await frame(); if (!document.querySelector('#sites-table tr.hl')) out.push('site row click did not highlight'); }
  for (const g of ['stack', 'user', 'op']) { change($('site-group'), g); await frame(); }
  for (const k of ['live', 'total', 'count', 'peak']) { change($('site-sort'), k); await frame(); }
  if (!$('mode-event').disabled) { $('mode-event').click(); await frame(); $('zoom-peak').click(); await frame(); $('mode-time').click(); await frame(); $('zoom-reset').click(); await frame(); }
  const more = $('inst-more'); if (more) { more.click(); await frame(); }
  $('show-reserved').click(); await frame(); $('show-reserved').click(); await frame();
  const dev = $('device');
  if (dev.options.length > 1) {
    for (let i = dev.options.length - 1; i >= 0; i--) { change(dev, String(i)); await frame(); }
    if (!(gpumemprofReport.stats.timeline || {}).drawnColumns && gpumemprofReport.stats.events) out.push('device switch left the timeline empty');
  }
  window.dispatchEvent(new Event('resize')); await new Promise((r) => setTimeout(r, 250)); await frame();
  if (gpumemprofReport.state !== 'ready') out.push('page state became ' + gpumemprofReport.state);
  return JSON.stringify(out);
})()
"""


# The cross-rank page (`gpumemprof html DIR`): rows drawn, hover names a rank, a click in the table
# and one on a row open that rank's full view (its own report, in an iframe) and it becomes ready.
RANKS_JS = r"""
(async function () {
  const $ = (id) => document.getElementById(id), out = [], P = window.gpumemprofRanks;
  const frame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  if (!P || P.stats.ranks < 2 || P.stats.points < 100) return JSON.stringify({problems: ['overview drew too little: ' + JSON.stringify(P && P.stats)]});
  const c = $('rk'), b = c.getBoundingClientRect(), rowH = b.height / P.stats.ranks;
  c.dispatchEvent(new MouseEvent('mousemove', { clientX: b.left + b.width * 0.6, clientY: b.top + rowH * 1.5, bubbles: true }));
  if (!/rank 1\b/.test($('tip').innerText) || !/requested/.test($('tip').innerText)) out.push('hovering row 1 showed ' + JSON.stringify($('tip').innerText));
  c.dispatchEvent(new MouseEvent('mouseleave'));
  async function opened(rank) {  // the iframe shows rank's report (titled "rank R ..."), ready
    let title = '';
    for (let i = 0; i < 400; i++) {
      const d = $('drill').contentDocument, st = d && d.getElementById('gmp-status');
      title = d ? d.title : '';
      if (st && st.dataset.state === 'error') { out.push('the full view of rank ' + rank + ' failed'); return title; }
      if (st && st.dataset.state === 'ready' && title.startsWith('rank ' + rank + ' ')) {
        const tl = ($('drill').contentWindow.gpumemprofReport.stats || {}).timeline || {};
        if (!(tl.drawnColumns > 0)) out.push('the full view of rank ' + rank + ' drew no timeline: ' + JSON.stringify(tl));
        return title;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    out.push('the full view of rank ' + rank + ' was not shown within 20 s (the frame shows ' + JSON.stringify(title) + ')');
    return title;
  }
  const D = JSON.parse($('gmp-ranks-data').textContent);
  document.querySelector('#rank-table tr.row[data-rank="' + D.maxRank + '"]').click();
  await frame();
  const first = await opened(D.maxRank);
  c.scrollIntoView({ block: 'start' });  // opening a rank scrolled its view into sight
  await frame();
  const b2 = c.getBoundingClientRect();
  c.dispatchEvent(new MouseEvent('click', { clientX: b2.left + b2.width * 0.5, clientY: b2.top + rowH * 0.5, bubbles: true }));
  await frame();
  const second = await opened(D.ranks[0].rank);
  if (P.drilled !== D.ranks[0].rank) out.push('clicking row 0 left rank ' + P.drilled + ' open');
  return JSON.stringify({problems: out, opened: [first, second]});
})()
"""


def drive(dt, script, what):
    """Runs an async page script returning JSON: (its value, None), or (None, the problem)."""
    r = dt.call("Runtime.evaluate", expression=script, awaitPromise=True, returnByValue=True)
    if "exceptionDetails" in r:
        return None, f"driving {what} threw: " + str(r["exceptionDetails"].get("exception", {}).get("description")
                                                      or r["exceptionDetails"].get("text"))
    return json.loads(r["result"]["value"]), None


def exercise_ranks(dt, result):
    got, problem = drive(dt, RANKS_JS, "the cross-rank page")
    if problem:
        return [problem]
    result["opened"] = got.get("opened")
    return got["problems"]


def exercise_controls(dt, result):
    problems, problem = drive(dt, CONTROLS_JS, "the controls")
    if problem:
        return [problem]
    result["controls"] = "ok" if not problems else "problems"
    return problems


# ---------------------------------------------------------------- one report
def check_category_view(dt, required):
    """The memory-by-category SVG (memory_timeline.hpp): drawn areas with a real size."""
    got = json.loads(dt.evaluate(
        "JSON.stringify([...document.querySelectorAll('svg.gmp-timeline')].map(s => {const r = s.getBoundingClientRect();"
        "return {w: r.width, h: r.height, areas: [...s.querySelectorAll('path.area')].map(p => p.dataset.category),"
        "filled: [...s.querySelectorAll('path.area')].filter(p => {const b = p.getBBox(); return b.width > 1 && b.height > 1;}).length,"
        "bands: s.querySelectorAll('g.band').length};}))"))
    problems = []
    if required and not got:
        problems.append("no memory-by-category view (svg.gmp-timeline) on the page")
    for v in got:
        # Every category gets an area; one of a few bytes may be thinner than a pixel.
        if v["w"] < 400 or v["h"] < 200 or not v["areas"] or v["filled"] < max(1, len(v["areas"]) // 2):
            problems.append(f"memory-by-category view looks empty: {v}")
    return got, problems


def check_report(chromium, path, shot_path, timeout, expect_timeline, expect_axis=None, static_page=False,
                 ranks_page=False):
    """static_page: a page without script (the memory timeline): ready once loaded, no report controls.
    ranks_page: the cross-rank page (its own controls, and a rank's report inside it)."""
    problems = []
    profile = tempfile.mkdtemp(prefix="gmp-chromium-")
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-extensions", "--disable-default-apps", "--mute-audio",
            "--hide-scrollbars", "--window-size=1400,1000", "--remote-debugging-port=0",
            "--remote-allow-origins=*", f"--user-data-dir={profile}", "about:blank"]
    launched = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = None
    result = {"report": os.path.basename(path), "bytes": os.path.getsize(path)}
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        while not os.path.exists(port_file) or os.path.getsize(port_file) == 0:
            if proc.poll() is not None:
                raise RuntimeError("chromium exited early: " + proc.stderr.read().decode(errors="replace")[-2000:])
            if time.monotonic() - launched > timeout:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(open(port_file).read().split()[0])
        pages = []
        while not pages:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if not pages:
                time.sleep(0.05)
        dt = DevTools(pages[0]["webSocketDebuggerUrl"], timeout)
        for domain in ("Runtime", "Log", "Page", "Network"):
            dt.call(domain + ".enable")
        dt.call("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False)
        url = "file://" + os.path.abspath(path)
        result["browser_start_s"] = round(time.monotonic() - launched, 3)
        nav_start = time.monotonic()
        nav = dt.call("Page.navigate", url=url)
        if nav.get("errorText"):
            raise RuntimeError("navigation failed: " + nav["errorText"])
        state = None
        while time.monotonic() - nav_start < timeout:
            state = dt.evaluate("document.readyState === 'complete' ? 'ready' : ''" if static_page else
                                "(document.getElementById('gmp-status')||{}).dataset?.state || ''")
            if state in ("ready", "error"):
                break
            time.sleep(0.03)
        ready = time.monotonic()
        result["navigate_to_ready_s"] = round(ready - nav_start, 3)
        result["launch_to_ready_s"] = round(ready - launched, 3)
        if state != "ready":
            problems.append(f"page state is {state!r}, not 'ready' after {timeout} s")
        info = dt.evaluate("JSON.stringify(window.%s || null)" % ("gpumemprofRanks" if ranks_page else "gpumemprofReport"))
        info = json.loads(info) if info else None
        result["page"] = info
        if info is None and not static_page:
            problems.append("window.gpumemprofReport is missing")
        result["categories"], found = check_category_view(dt, static_page)
        problems += found
        # The timeline opens on the axis the model chose: events when wall-clock time is mostly idle.
        result["axis"] = None if static_page or ranks_page else dt.evaluate(
            "document.getElementById('mode-event').className === 'on' ? 'event' : "
            "document.getElementById('mode-time').className === 'on' ? 'time' : ''")
        if expect_axis and result["axis"] != expect_axis and not static_page:
            problems.append(f"the timeline opened on the {result['axis']!r} axis, not {expect_axis!r}")
        time.sleep(0.2)  # let late console messages arrive
        dt.evaluate("1")
        metrics = dt.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics.get("contentSize")
        height = int(min(size["height"], 12000))
        shot = dt.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                       clip={"x": 0, "y": 0, "width": 1400, "height": height, "scale": 1})
        png = base64.b64decode(shot["data"])
        with open(shot_path, "wb") as f:
            f.write(png)
        result["screenshot"] = shot_path
        frac, ncolors, dims = pixel_stats(png)
        result["nonwhite_fraction"] = round(frac, 3)
        result["distinct_colors"] = ncolors
        if frac < 0.05 or ncolors < 16:
            problems.append(f"page looks blank: {frac:.1%} non-white pixels, {ncolors} colors")
        if expect_timeline:
            box = dt.evaluate("JSON.stringify((function(){const r=document.getElementById('tl').getBoundingClientRect();"
                              "return [r.left+window.scrollX,r.top+window.scrollY,r.right+window.scrollX,r.bottom+window.scrollY];})())")
            x0, y0, x1, y1 = (int(v) for v in json.loads(box))
            tfrac, tcolors, _ = pixel_stats(png, (x0 + 80, y0 + 30, x1 - 20, y1 - 32))
            result["timeline_nonwhite_fraction"] = round(tfrac, 3)
            result["timeline_colors"] = tcolors
            tl = (info or {}).get("stats", {}).get("timeline") or {}
            if tfrac < 0.05 or tcolors < 8 or tl.get("drawnColumns", 0) < 100:
                problems.append(f"timeline looks empty: {tfrac:.1%} colored, {tcolors} colors, stats {tl}")
        if expect_timeline and state == "ready":
            problems += exercise_timeline(dt, os.path.splitext(shot_path)[0] + "_zoomed.png", result)
        if state == "ready" and ranks_page:
            problems += exercise_ranks(dt, result)
            shot = dt.call("Page.captureScreenshot", format="png")
            result["drilled_screenshot"] = os.path.splitext(shot_path)[0] + "_drilled.png"
            with open(result["drilled_screenshot"], "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        elif state == "ready" and not static_page:
            problems += exercise_controls(dt, result)
        for ev in dt.events:
            m, p = ev["method"], ev.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                problems.append("uncaught exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
                problems.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
                e = p["entry"]
                problems.append(f"log {e.get('level')} ({e.get('source')}): {e.get('text')} {e.get('url', '')}")
            elif m == "Network.requestWillBeSent":
                u = p.get("request", {}).get("url", "")
                if not u.startswith(("file:", "data:", "blob:", "about:")):
                    problems.append("page tried to reach the network: " + u)
            elif m == "Network.loadingFailed":
                problems.append("load failed: " + str(p.get("errorText")))
    except Exception as e:  # noqa: BLE001 -- report any failure as a problem of this page
        problems.append(f"{type(e).__name__}: {e}")
    finally:
        if dt:
            dt.ws.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
    result["problems"] = problems
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--maker", help="the html_make_report program (renders the synthetic reports)")
    ap.add_argument("--report", action="append", default=[], help="an existing report to check (repeatable)")
    ap.add_argument("--snapshot", action="append", default=[], help="a snapshot file to render with --maker and check")
    ap.add_argument("--out", help="keep reports and screenshots here (default: a temporary folder)")
    ap.add_argument("--big-events", type=int, default=1_000_000, help="entries of the large trace (0: skip it)")
    ap.add_argument("--big-limit-s", type=float, default=30.0, help="fail when the large report takes longer to be ready")
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args()

    chromium = find_chromium()
    if not chromium:
        print("SKIP: Chromium is not installed (apt-get install chromium, or set CHROMIUM=path)")
        return SKIP
    out = a.out or tempfile.mkdtemp(prefix="gmp-html-check-")
    os.makedirs(out, exist_ok=True)

    jobs = []  # (report path, expects a timeline, time limit, expected initial axis, a static page)
    if a.maker:
        variants = [("synthetic", [], True, None), ("no_trace", ["--no-trace"], False, None),
                    ("no_frames", ["--no-frames"], True, None), ("two_devices", ["--two-devices"], True, None),
                    ("idle", ["--idle"], True, None)]
        axes = {"synthetic": "time", "idle": "event"}  # busy: wall-clock time; mostly idle: events
        if a.big_events:
            variants.append((f"synthetic_{a.big_events}", ["--events", str(a.big_events)], True, a.big_limit_s))
        for i, snap in enumerate(a.snapshot):
            variants.append((f"snapshot{i}_" + os.path.basename(snap).split(".")[0], ["--snapshot", snap], None, None))
        for name, extra, timeline, limit in variants:
            path = os.path.join(out, name + ".html")
            r = subprocess.run([a.maker, path, "--title", f"gpumemprof browser check: {name}"] + extra,
                               capture_output=True, text=True)
            if r.returncode == SKIP:
                print(f"skip {name}: {r.stderr.strip()}")
                continue
            if r.returncode != 0:
                print(f"FAIL {name}: the maker failed: {r.stderr.strip()}")
                return 1
            print(r.stdout.strip())
            jobs.append((path, timeline, limit, axes.get(name), False))
        # The memory timeline by category: a page of its own (no script), drawn in C++ as SVG.
        path = os.path.join(out, "memory_timeline.html")
        r = subprocess.run([a.maker, path, "--timeline"], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL memory_timeline: the maker failed: {r.stderr.strip()}")
            return 1
        print(r.stdout.strip())
        jobs.append((path, False, None, None, True))
        # The cross-rank page of 4 synthetic ranks (`gpumemprof html DIR`).
        path = os.path.join(out, "ranks.html")
        r = subprocess.run([a.maker, path, "--ranks", "4"], capture_output=True, text=True)
        if r.returncode not in (0, SKIP):
            print(f"FAIL ranks: the maker failed: {r.stderr.strip()}")
            return 1
        print(r.stdout.strip() or r.stderr.strip())
        if r.returncode == 0:
            jobs.append((path, False, None, None, "ranks"))
    jobs += [(p, None, None, None, False) for p in a.report]
    if not jobs:
        ap.error("nothing to check: give --maker or --report")

    failed = 0
    print(f"chromium: {subprocess.run([chromium, '--version'], capture_output=True, text=True).stdout.strip()}")
    for path, timeline, limit, axis, static_page in jobs:
        if timeline is None:  # a report of a snapshot file: expect a timeline if it has a trace
            timeline = '"nEvents":0' not in open(path, encoding="utf-8", errors="replace").read(4 << 20)
        shot = os.path.splitext(path)[0] + ".png"
        r = check_report(chromium, path, shot, a.timeout, timeline, axis, static_page is True, static_page == "ranks")
        page = r.get("page") or {}
        if limit is not None and r.get("launch_to_ready_s", 1e9) > limit:
            r["problems"].append(f"took {r.get('launch_to_ready_s')} s to be ready (limit {limit} s)")
        ok = not r["problems"]
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {r['report']}: {r['bytes'] / 1e6:.1f} MB, launch->ready {r.get('launch_to_ready_s')} s "
              f"(browser start {r.get('browser_start_s')} s, navigate->ready {r.get('navigate_to_ready_s')} s, "
              f"page script {page.get('timings', {}).get('totalMs', float('nan')):.0f} ms), "
              f"{r.get('nonwhite_fraction')} non-white, {r.get('distinct_colors')} colors, "
              f"timeline {page.get('stats', {}).get('timeline')}, axis {r.get('axis')}, screenshot {r.get('screenshot')}, "
              f"by category {[(v['areas'], v['bands']) for v in r.get('categories') or []]}")
        if r.get("hover_tooltip") is not None:
            print(f"     interaction: hover -> {r['hover_tooltip'].splitlines()[0] if r['hover_tooltip'] else 'no tooltip'!r}; "
                  f"4 wheel zooms {r.get('zoom_4_wheels_s')} s; click -> {r.get('click')}; zoomed screenshot {r.get('zoomed_screenshot')}")
        if r.get("opened") is not None:
            print(f"     full views opened: {r['opened']}; screenshot {r.get('drilled_screenshot')}")
        for p in r["problems"]:
            print("     - " + p)
    print(f"{len(jobs) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
