#!/usr/bin/env python3
"""Prints two `trawl-bench --json` reports side by side: every figure both have, by section and
name, with its median before and after and the change. Used to check that a refactoring left the
figures (calls per URL, write units, pages/s) within noise: `python3 bench/compare.py
before.json after.json`. A figure only one report has is listed under it, not compared."""

import json
import sys


def figures(path):
    with open(path) as f:
        report = json.load(f)
    return report, {(x["section"], x["name"]): x for x in report["figures"]}


def number(v):
    return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"


def main(before_path, after_path):
    before, b = figures(before_path)
    after, a = figures(after_path)
    for label, report in (("before", before), ("after", after)):
        machine = report.get("machine", {})
        print(f"{label}: {report.get('command', '?')} ({machine})")
    print()
    print("| section | figure | unit | before | after | change |")
    print("|---|---|---|---:|---:|---:|")
    for key in [k for k in b if k in a]:
        x, y = b[key], a[key]
        change = "" if x["median"] == 0 else f"{(y['median'] - x['median']) / abs(x['median']):+.1%}"
        print(f"| {key[0]} | {key[1]} | {x['unit']} | {number(x['median'])} | {number(y['median'])} | {change} |")
    for label, only in (("before", [k for k in b if k not in a]), ("after", [k for k in a if k not in b])):
        if only:
            print(f"\nonly {label}: " + "; ".join(f"{s}: {n}" for s, n in only))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: compare.py BEFORE.json AFTER.json")
    main(sys.argv[1], sys.argv[2])
