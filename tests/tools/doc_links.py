"""The README and the documentation hold together: README.md is at most 300 lines, and every relative
link in README.md and docs/*.md names a file or folder of the repository (an anchor, #..., is
checked against the headings of the page it names). Links to other sites are not followed.

usage: doc_links.py SOURCE_DIR
"""
import glob
import os
import re
import sys

SRC = sys.argv[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
failures = []


def anchors(path):
    """GitHub's anchors of a markdown page's headings: lowercased, punctuation dropped, spaces to '-'."""
    out = set()
    with open(path, encoding="utf-8") as f:
        in_code = False
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            if in_code or not line.startswith("#"):
                continue
            text = line.lstrip("#").strip().lower()
            text = re.sub(r"[^\w\- ]", "", text)
            out.add(text.replace(" ", "-"))
    return out


pages = [os.path.join(SRC, "README.md")] + sorted(glob.glob(os.path.join(SRC, "docs", "*.md")))
with open(pages[0], encoding="utf-8") as f:
    lines = sum(1 for _ in f)
if lines > 300:
    failures.append(f"README.md has {lines} lines (at most 300: the detail belongs in docs/)")
checked = 0
for page in pages:
    with open(page, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # another site
        checked += 1
        path, _, anchor = target.partition("#")
        named = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        where = os.path.relpath(page, SRC)
        if not os.path.exists(named):
            failures.append(f"{where}: link to {target}: no such file")
        elif anchor and named.endswith(".md") and anchor not in anchors(named):
            failures.append(f"{where}: link to {target}: no heading with that anchor")
for f in failures:
    print("FAIL: " + f)
if not failures:
    print(f"ok: README.md has {lines} lines; {checked} relative links in {len(pages)} pages resolve")
sys.exit(1 if failures else 0)
