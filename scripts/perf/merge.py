#!/usr/bin/env python3
"""merge.py - one results file from the part files of one or more
scripts/bench.sh calls (OUT/<part>.json, common.py's format).

  merge.py -o results.json PATH...     (a PATH may be a directory: its *.json part files;
                                        or a results file merge.py wrote, e.g.
                                        docs/perf/results.json: its parts, so that a call
                                        that measured a few parts adds to the page's others)

The result is {"fragpool_bench": 1, "merged": DATE, "parts": {NAME: part}, "sources":
{NAME: path}, "warnings": [...]}.  Rules: a file that is not a part file is
skipped with one line saying why; when two files hold the same part, the
one measured later (meta.date) is kept and a warning says so, except for
"real" and "real-budget", which are made of one call per workload: their
rows (budgets) are combined by (workload, variant, group), the later call
winning a tie, and the part keeps every call's machine line in "calls"; parts
measured at different commits or on different GPUs are kept, with a
warning (the page shows each part's own machine line).  Exit status 2 when
no part file was found, else 0.
"""
import argparse
import datetime
import glob
import json
import os
import sys

import common

PARTS = ("cpu", "gpu-host", "traces", "real", "real-budget", "offline")
COMBINED = {"real": "rows", "real-budget": "budgets"}  # part -> its list of per-workload entries
STATUS_RANK = {"ok": 0, "partial": 1, "failed": 2}


def part_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(f for f in glob.glob(os.path.join(p, "*.json"))
                            if os.path.basename(f)[:-5] in PARTS)
        else:
            files.append(p)
    return files


def load_docs(path):
    """[(source, part document)] of a part file, or of each part of a results file
    merge.py wrote; [] after one line on stderr saying why the file is skipped."""
    try:
        doc = common.read_json(path, "part file")
    except common.BadInput as e:
        print(f"bench merge: {e}; skipping it", file=sys.stderr)
        return []
    if isinstance(doc, dict) and isinstance(doc.get("parts"), dict) and "part" not in doc:
        got = [(f"{path}#{name}", check_part(f"{path}#{name}", d)) for name, d in sorted(doc["parts"].items())]
        return [(src, d) for src, d in got if d is not None]
    doc = check_part(path, doc)
    return [(path, doc)] if doc is not None else []


def check_part(path, doc):
    """doc when it is a part document, else None after one line on stderr."""
    if not isinstance(doc, dict) or doc.get("fragpool_bench") != common.FORMAT or doc.get("part") not in PARTS:
        print(f"bench merge: {path} is not a scripts/bench.sh part file (format {common.FORMAT}, "
              f"part one of {', '.join(PARTS)}); skipping it", file=sys.stderr)
        return None
    if not isinstance(doc.get("meta"), dict) or not isinstance(doc.get("data"), dict):
        print(f"bench merge: {path} lacks its meta or data object; skipping it", file=sys.stderr)
        return None
    return doc


def calls_of(doc, path):
    """The calls a part was measured in: those a merged part lists, else its own."""
    return doc.get("calls") or [call_of(doc, path)]


def call_of(doc, path):
    return {"meta": doc["meta"], "status": doc.get("status"), "invocation": doc.get("invocation"),
            "elapsed_s": doc.get("elapsed_s"), "budget_s": doc.get("budget_s"), "source": path}


def entry_key(e):
    return (e.get("workload"), e.get("variant"), e.get("group"))


def combine(old, doc, path):
    """Part `doc` (from path) folded into the combined part `old` (None for the first)."""
    key = COMBINED[doc["part"]]
    if old is None:
        new = dict(doc, calls=calls_of(doc, path), data=dict(doc["data"]))
        return new
    first, second = sorted((old, doc), key=lambda d: str(d["meta"].get("date", "")))
    entries = {entry_key(e): e for e in first["data"].get(key, [])}
    entries.update({entry_key(e): e for e in second["data"].get(key, [])})
    data = dict(first["data"])
    data.update({k: v for k, v in second["data"].items() if k != key})
    data[key] = list(entries.values())
    have = {(e.get("workload"), e.get("variant")) for e in data[key]}
    if "workloads" in first["data"] or "workloads" in second["data"]:
        data["workloads"] = list(dict.fromkeys(first["data"].get("workloads", []) + second["data"].get("workloads", [])))
    if "not_run" in data:
        nr = first["data"].get("not_run", []) + second["data"].get("not_run", [])
        data["not_run"] = [x for x in dict.fromkeys(nr) if tuple(x.split(" ", 1)) not in have]
    if "drift" in data:
        data["drift"] = dict(first["data"].get("drift") or {}, **(second["data"].get("drift") or {}))
    calls = old["calls"] + calls_of(doc, path)
    return dict(second, data=data, calls=calls,
                status=max((old["status"], doc.get("status")), key=lambda s: STATUS_RANK.get(s, 2)),
                notes=(old.get("notes") or []) + (doc.get("notes") or []))


def merge(paths):
    parts, sources, warnings = {}, {}, []
    for path, doc in (pd for f in part_files(paths) for pd in load_docs(f)):
        name = doc["part"]
        old = parts.get(name)
        if name in COMBINED:
            parts[name] = combine(old, doc, path)
            sources[name] = (sources.get(name, "") + " " + path).strip()
            continue
        if old is not None:
            keep_new = str(doc["meta"].get("date", "")) >= str(old["meta"].get("date", ""))
            warnings.append(f"two files hold part {name}: kept {path if keep_new else sources[name]} "
                            f"(measured later), dropped {sources[name] if keep_new else path}")
            if not keep_new:
                continue
        parts[name] = doc
        sources[name] = path
    for key, what in (("commit", "commits"), ("gpu", "GPUs")):
        seen = sorted({str(p["meta"].get(key)) for p in parts.values()})
        if len(seen) > 1:
            warnings.append(f"the parts were measured at different {what}: {', '.join(seen)}")
    return {"fragpool_bench": common.FORMAT,
            "merged": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "parts": parts, "sources": sources, "warnings": warnings}


def run(a):
    res = merge(a.paths)
    if not res["parts"]:
        raise common.BadInput("no part file found in " + " ".join(a.paths) + "; nothing written")
    with open(a.output, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    for w in res["warnings"]:
        print(f"bench merge: warning: {w}")
    print(f"bench merge: {len(res['parts'])} part(s) ({', '.join(sorted(res['parts']))}) -> {a.output}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-o", "--output", required=True)
    p.add_argument("paths", nargs="+")
    return common.main_guard(lambda: run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
