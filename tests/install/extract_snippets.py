#!/usr/bin/env python3
"""Writes every C/C++ fenced code block of a Markdown file to its own source
file, named after the line it starts at (readme_L23.cpp), so that a failing
block points at the README. Exits 1 if the file has no such block.

usage: extract_snippets.py README.md OUTDIR"""
import pathlib
import re
import sys

LANGS = {"c": ".c", "cpp": ".cpp", "c++": ".cpp", "cxx": ".cpp", "cc": ".cpp"}


def main() -> int:
    src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    lines = src.read_text(encoding="utf-8").splitlines()
    count, i = 0, 0
    while i < len(lines):
        m = re.match(r"^\s*```\s*([A-Za-z+]+)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i + 1, m.group(1).lower()
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        if j == len(lines):
            print(f"{src}:{start}: unterminated code block", file=sys.stderr)
            return 1
        if lang in LANGS:
            name = out / f"readme_L{start}{LANGS[lang]}"
            name.write_text(f'#line {start + 1} "{src.name}"\n' + "\n".join(lines[i + 1:j]) + "\n", encoding="utf-8")
            print(name)
            count += 1
        i = j + 1
    if count == 0:
        print(f"{src}: no C or C++ code block found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
