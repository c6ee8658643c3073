"""Every relative link of the README and docs/ names a file that exists, and
an anchor a heading of it (GitHub's slugs).  links.py REPO"""
import os, re, sys
repo = sys.argv[1]
def slug(h):
    h = h.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")
def anchors(path):
    out = set()
    inside = False
    for line in open(path):
        if line.startswith("```"): inside = not inside
        if not inside and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out
bad = 0
for doc in [os.path.join(repo, "README.md")] + sorted(os.path.join(repo, "docs", f) for f in os.listdir(os.path.join(repo, "docs")) if f.endswith(".md")):
    text = open(doc).read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target): continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if not os.path.exists(full):
            print(f"{os.path.relpath(doc, repo)}: {target}: no such file"); bad += 1; continue
        if anchor and full.endswith(".md") and anchor not in anchors(full):
            print(f"{os.path.relpath(doc, repo)}: {target}: no such heading"); bad += 1
sys.exit(1 if bad else 0)
