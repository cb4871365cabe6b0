#!/usr/bin/env python3
"""Turns the HTML reports' pages (web/*.html, *.css, *.js) into the C++ headers that embed them.

The pages are real files: edit them, then run

  python3 web/embed_assets.py            (or: ninja -C build web-assets)

to rewrite include/gpumemprof/export/reports/html_report_assets.hpp and html_ranks_assets.hpp.
The generated headers are committed, so the library stays usable with a plain `-I include`, as an
installed header set and in compiled mode; `--check` (the test `web_assets`) fails when they are
out of date with the files here, and checks every script's syntax with `node --check`.

A page template is an HTML file with these directives:
  {{# text}}          a line dropped from the output (a comment about the template)
  {{include FILE}}    a line replaced by FILE (a sibling file; its text ends with a newline)
  {{title}}           where the writer puts the page's title (HTML-escaped)
  {{data}}            where the writer puts the page's data (JSON in a <script> element; the
                      writer may close that element and open more data elements before the rest)
Each header gets, per page, three arrays of pieces in order: kHead (up to the title), kBeforeData
(from the title to the data) and kAfterData (the rest). A file included by several pages is one
constant, defined in the first page's header. Pieces stay under 64 KB (some compilers' limit on a
string literal).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HEADER_DIR = os.path.join(ROOT, "include", "gpumemprof", "export", "reports")
# (template, header, namespace, what the page is)
PAGES = [
    ("report.html", "html_report_assets.hpp", "html_assets",
     "the offline HTML report's page (html_report.hpp writes it)"),
    ("ranks.html", "html_ranks_assets.hpp", "html_ranks_assets",
     "the cross-rank page (html_ranks_report.hpp writes it)"),
]
MAX_PIECE = 60000
DELIM = "GMP"
SECTIONS = ("kHead", "kBeforeData", "kAfterData")


def const_name(filename):
    return "k" + "".join(p[:1].upper() + p[1:] for p in re.split(r"[-_.]", filename) if p)


def parse(template):
    """Returns three sections, each a list of ("text", str) or ("file", name)."""
    sections = [[]]
    text = open(os.path.join(HERE, template), encoding="utf-8").read()
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("{{#") and stripped.endswith("}}"):
            continue
        m = re.fullmatch(r"\{\{include ([\w.-]+)\}\}", stripped)
        if m:
            if not os.path.isfile(os.path.join(HERE, m.group(1))):
                sys.exit(f"{template}: includes {m.group(1)}, which is not in web/")
            sections[-1].append(("file", m.group(1)))
            continue
        for part in re.split(r"(\{\{(?:title|data)\}\})", line):
            if part == "{{title}}" and len(sections) == 1 or part == "{{data}}" and len(sections) == 2:
                sections.append([])
            elif part.startswith("{{") and part.endswith("}}"):
                sys.exit(f"{template}: unknown or misplaced directive {part}")
            elif part:
                if sections[-1] and sections[-1][-1][0] == "text":
                    sections[-1][-1] = ("text", sections[-1][-1][1] + part)
                else:
                    sections[-1].append(("text", part))
    if len(sections) != 3:
        sys.exit(f"{template}: needs {{{{title}}}} and then {{{{data}}}}")
    return sections


def split(text):
    """Pieces of at most MAX_PIECE bytes, cut after a newline."""
    out = []
    while len(text.encode()) > MAX_PIECE:
        cut = text.rfind("\n", 0, MAX_PIECE // 4 * 3) + 1 or MAX_PIECE // 4
        out.append(text[:cut])
        text = text[cut:]
    return out + [text]


def literal(text, where):
    if ")" + DELIM + '"' in text:
        sys.exit(f"{where}: contains ){DELIM}\", which would end the C++ raw string")
    return f'R"{DELIM}({text}){DELIM}"'


def generate():
    """Returns {header path: text}."""
    defined = {}  # file -> namespace it is defined in
    headers = {}
    for template, header, ns, what in PAGES:
        consts, arrays, includes = [], [], []
        for section_name, section in zip(SECTIONS, parse(template)):
            pieces = []
            for kind, value in section:
                if kind == "text":
                    pieces += [literal(p, template) for p in split(value)]
                    continue
                name = const_name(value)
                if value in defined and defined[value] != ns:
                    pieces.append(f"{defined[value]}::{name}")
                    if defined[value] not in includes:
                        includes.append(defined[value])
                    continue
                parts = split(open(os.path.join(HERE, value), encoding="utf-8").read())
                if value not in defined:
                    defined[value] = ns
                    consts.append(f"// web/{value}")
                    for i, p in enumerate(parts):
                        suffix = str(i) if len(parts) > 1 else ""
                        consts.append(f"inline constexpr std::string_view {name}{suffix} = {literal(p, value)};\n")
                pieces += [f"{name}{i if len(parts) > 1 else ''}" for i in range(len(parts))]
            arrays.append(f"inline constexpr std::array<std::string_view, {len(pieces)}> {section_name} = {{\n    " +
                          ",\n    ".join(pieces) + "};")
        inc_lines = "".join(f'#include "gpumemprof/export/reports/{h}"\n'
                            for t, h, n, _ in PAGES if n in includes)
        headers[os.path.join(HEADER_DIR, header)] = f"""\
// Layer 5: {what}.
// Generated by web/embed_assets.py from web/{template} and the files it includes. Do not edit:
// edit those files and run `python3 web/embed_assets.py` (or `ninja -C build web-assets`); the
// test web_assets fails while this header is out of date.
// The page is kHead, the title (HTML-escaped), kBeforeData, the data (JSON), kAfterData.
// clang-format off
#pragma once

#include <array>
#include <string_view>

#include "gpumemprof/config.hpp"
{inc_lines}
GPUMEMPROF_NAMESPACE_BEGIN

namespace detail::{ns} {{

{chr(10).join(consts)}
{chr(10).join(arrays)}

}}  // namespace detail::{ns}

GPUMEMPROF_NAMESPACE_END
// clang-format on
"""
    return headers


def page_scripts(template):
    """Each inline <script> of a page, assembled, without the data elements."""
    sections = parse(template)
    text = "".join(open(os.path.join(HERE, v), encoding="utf-8").read() if k == "file" else v
                   for k, v in sections[2])
    return [s for s in re.findall(r"<script>\n(.*?)</script>", text, re.S)]


def node_check():
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        print("web_assets: node is not installed (apt-get install nodejs): the scripts' syntax was not checked")
        return 77
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        targets = [os.path.join(HERE, f) for f in sorted(os.listdir(HERE)) if f.endswith(".js")]
        for template, *_ in PAGES:
            for i, script in enumerate(page_scripts(template)):
                path = os.path.join(tmp, f"{template}.script{i}.js")
                open(path, "w", encoding="utf-8").write(script)
                targets.append(path)
        for path in targets:
            r = subprocess.run([node, "--check", path], capture_output=True, text=True)
            if r.returncode != 0:
                bad += 1
                print(f"web_assets: {os.path.basename(path)}: syntax error\n{r.stderr}")
        print(f"web_assets: node --check on {len(targets)} scripts, {bad} with errors")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="fail if the headers differ from the files; check the scripts' syntax")
    args = ap.parse_args()
    headers = generate()
    if args.check:
        stale = [p for p, t in headers.items()
                 if not os.path.exists(p) or open(p, encoding="utf-8").read() != t]
        for p in stale:
            print(f"web_assets: {os.path.relpath(p, ROOT)} is out of date with web/: "
                  "run `python3 web/embed_assets.py` (or `ninja -C build web-assets`) and commit it")
        rc = node_check()
        return 1 if stale or rc == 1 else rc
    for path, text in headers.items():
        if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
            open(path, "w", encoding="utf-8").write(text)
            print(f"wrote {os.path.relpath(path, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
