"""Size of the tree: lines per folder and language, and the largest files.

    python scripts/size_report.py [--top 15] [--depth 2] [--over 1000]

Counts the files git tracks (so build outputs and caches never count), by lines. Files past
`--over` lines (STYLE.md: past 1000 a file is doing too much) are listed whatever their rank.
Prints only; it never fails a run.
"""

import argparse
import collections
import os
import subprocess
import sys

LANGUAGES = {
    ".cpp": "C++", ".h": "C++", ".cc": "C++", ".c": "C", ".def": "C++",
    ".py": "Python", ".sh": "Shell", ".md": "Markdown", ".txt": "text", ".toml": "TOML",
    ".mlir": "text", ".json": "JSON", ".yaml": "YAML", ".yml": "YAML",
}
# Recorded data (benchmark results, golden outputs) is listed apart: it is not code to read.
DATA_FOLDERS = ("benchmarks/results/", "tests/cpp/golden/", "tests/python/golden/")


def language(path, head=b""):
    name = os.path.basename(path)
    if name == "CMakeLists.txt" or name.endswith(".cmake"):
        return "CMake"
    if not os.path.splitext(name)[1] and head.startswith(b"#!") and b"sh" in head.split(b"\n", 1)[0]:
        return "Shell"
    return LANGUAGES.get(os.path.splitext(name)[1], "other")


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def read_text(path):
    """(lines, first bytes), or None for a binary or missing file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:  # a file deleted but not yet committed
        return None
    if b"\0" in data[:8192]:
        return None  # binary (PNG charts and the like)
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0), data[:100]


def folder(path, depth):
    parts = path.split("/")[:-1]
    return "/".join(parts[:depth]) + "/" if parts else "./"


def report(root, top, depth, over):
    per_folder = collections.defaultdict(collections.Counter)
    per_lang = collections.Counter()
    data_lines = collections.Counter()
    sizes = []
    for rel in tracked_files(root):
        text = read_text(os.path.join(root, rel))
        if text is None:
            continue
        n, head = text
        lang = language(rel, head)
        if rel.startswith(DATA_FOLDERS):
            data_lines[lang] += n
            continue
        per_folder[folder(rel, depth)][lang] += n
        per_lang[lang] += n
        if lang in ("C++", "C", "Python", "Shell", "CMake"):
            sizes.append((n, rel))
    langs = [lang for lang, _ in per_lang.most_common()]
    total = sum(per_lang.values())

    lines = [f"size of the tree: {total} lines in tracked text files (recorded data apart)"]
    header = f"{'folder':34}" + "".join(f"{lang:>10}" for lang in langs) + f"{'total':>10}"
    lines += ["", header, "-" * len(header)]
    for name in sorted(per_folder):
        c = per_folder[name]
        lines.append(f"{name:34}" + "".join(f"{c[lang] or '':>10}" for lang in langs) + f"{sum(c.values()):>10}")
    lines.append(f"{'total':34}" + "".join(f"{per_lang[lang]:>10}" for lang in langs) + f"{total:>10}")
    if data_lines:
        lines.append("recorded data (" + ", ".join(DATA_FOLDERS) + "): "
                     + ", ".join(f"{lang} {n}" for lang, n in data_lines.most_common()))
    sizes.sort(reverse=True)
    lines += ["", f"largest code files (over {over} lines marked *):"]
    shown = sizes[:top] + [s for s in sizes[top:] if s[0] > over]
    for n, rel in shown:
        lines.append(f"  {n:>6}{' *' if n > over else '  '} {rel}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--top", type=int, default=15, help="how many of the largest files to list")
    p.add_argument("--depth", type=int, default=2, help="folder depth of the per-folder table")
    p.add_argument("--over", type=int, default=1000, help="list every file past this many lines")
    args = p.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print(report(root, args.top, args.depth, args.over))
    return 0


if __name__ == "__main__":
    sys.exit(main())
