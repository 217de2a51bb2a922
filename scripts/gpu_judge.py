#!/usr/bin/env python3
"""scripts/gpu_judge.py - the judging and the results table of gpu-check.sh.

gpu-check.sh runs the checks; this file reads what they left behind and
decides, so that each rule is written once, in one language:

  served JSON_DIR NAME MODE   sums the fragpool JSON summaries NAME-*.json
                              of one check; prints one line of key numbers;
                              exit 0 when they show that fragpool served the
                              allocations (MODE strict: allocs > 0,
                              cache_hits > 0, reserve_calls <= allocs / 2;
                              MODE served: allocs > 0; both: no invalid
                              frees, no config errors, every file readable)
  ipc JSON_DIR NAME           the IPC counters of those summaries, summed
  lines NAME FILE             the PASS/FAIL/SKIP lines of a script group's
                              output as result rows (NAME<TAB>RESULT<TAB>NOTE)
  table RESULTS_TSV LOG_LINE  the final table, LOG_LINE, then
                              "N passed, N failed, N skipped"; exit 1 when a
                              row is neither PASS nor SKIP nor PLAN

Invariant: nothing here runs a program or touches the GPU; bad input (a
missing file, unreadable JSON) becomes part of the note and a FAIL, never a
traceback.
"""
import glob
import json
import os
import sys

COUNTS = ("allocs", "cache_hits", "reserve_calls", "frees", "invalid_frees", "oom_count")
IPC = ("exports", "exports_fragpool", "refused", "opens", "opens_fragpool", "closes",
       "own_segments")


def summaries(d, name):
    """The JSON summaries of check NAME: (list of (file, dict), list of errors)."""
    out, bad = [], []
    for f in sorted(glob.glob(os.path.join(d, name + "-*.json"))):
        try:
            with open(f) as fh:
                out.append((f, json.load(fh)))
        except Exception as e:  # unreadable or half written: reported, not raised
            bad.append("%s: %r" % (os.path.basename(f), e))
    return out, bad


def peak(dv, key):
    v = dv.get(key) or {}
    return int(v.get("peak") or 0) if isinstance(v, dict) else 0


def served_totals(docs):
    t = dict.fromkeys(COUNTS, 0)
    agg = dict(seg=0, res=0, alc=0, pt=0, leaks=0, frag=None, errs=[])
    for _, j in docs:
        agg["errs"] += j.get("config_errors") or []
        for dv in j.get("devices") or []:
            for k in t:
                t[k] += int(dv.get(k) or 0)
            agg["seg"] = max(agg["seg"], peak(dv, "segments"))
            agg["res"] = max(agg["res"], peak(dv, "reserved"))
            agg["alc"] = max(agg["alc"], peak(dv, "allocated"))
            agg["pt"] += sum(int(v or 0) for v in (dv.get("passthrough") or {}).values())
            agg["leaks"] += int((dv.get("leaks") or {}).get("count") or 0)
            if dv.get("fragmentation") is not None:
                agg["frag"] = max(agg["frag"] or 0.0, float(dv["fragmentation"]))
    return t, agg


def served_note(t, agg, nfiles, bad):
    a, h, r = t["allocs"], t["cache_hits"], t["reserve_calls"]
    note = "allocs %d, hits %d (%.1f%%), reserves %d, seg peak %d, reserved peak %.0f MiB" % (
        a, h, 100.0 * h / a if a else 0.0, r, agg["seg"], agg["res"] / 2**20)
    if agg["frag"] is not None:
        note += ", frag %.3f" % agg["frag"]
    if agg["pt"]:
        note += ", passed through %d" % agg["pt"]
    if t["invalid_frees"]:
        note += ", INVALID FREES %d" % t["invalid_frees"]
    if t["oom_count"]:
        note += ", OOMs %d" % t["oom_count"]
    if agg["leaks"]:
        note += ", live at exit %d" % agg["leaks"]
    if nfiles > 1:
        note += " (%d processes)" % nfiles
    if agg["errs"]:
        note += "; CONFIG ERRORS: " + " | ".join(agg["errs"])
    if bad:
        note += "; BAD JSON: " + " | ".join(bad)
    return note


def served(d, name, mode):
    docs, bad = summaries(d, name)
    if not docs and not bad:
        print("no fragpool JSON summary written (fragpool not loaded, or the process died)")
        return 1
    t, agg = served_totals(docs)
    note = served_note(t, agg, len(docs) + len(bad), bad)
    a, h, r = t["allocs"], t["cache_hits"], t["reserve_calls"]
    ok = a > 0 and not t["invalid_frees"] and not agg["errs"] and not bad
    why = []
    if a == 0:
        why.append("no allocation reached the pool")
    if mode == "strict":
        if h == 0:
            why.append("no cache hit")
        if r * 2 > a:
            why.append("reserve_calls > allocs/2")
        ok = ok and h > 0 and r * 2 <= a
    if why:
        note += "; NOT SERVED: " + ", ".join(why)
    print(note)
    return 0 if ok else 1


def ipc(d, name):
    t = dict.fromkeys(IPC, 0)
    docs, _ = summaries(d, name)
    for _, j in docs:
        for dv in j.get("devices") or []:
            for k in t:
                t[k] += int((dv.get("ipc") or {}).get(k) or 0)
    print("ipc: exports %(exports)d (fragpool handles %(exports_fragpool)d), refused %(refused)d, "
          "opens %(opens)d (fragpool handles %(opens_fragpool)d), closes %(closes)d, "
          "own segments %(own_segments)d" % t)
    return 0


def lines(group, path):
    """Result rows from "PASS name note" / "FAIL name note" / "SKIP name note"."""
    rows = []
    try:
        with open(path, errors="replace") as fh:
            for line in fh:
                w = line.rstrip("\n").split(None, 2)
                if len(w) >= 2 and w[0] in ("PASS", "FAIL", "SKIP"):
                    note = (w[2] if len(w) > 2 else "").replace("\t", " ")
                    rows.append((w[1], w[0], note[:400]))
    except OSError as e:
        print("%s\tFAIL\tcannot read its output: %s" % (group, e))
        return 1
    for r in rows:
        print("\t".join(r))
    return 0


def table(tsv, log_line):
    rows = []
    try:
        with open(tsv, errors="replace") as fh:
            for line in fh:
                w = line.rstrip("\n").split("\t", 2)
                rows.append((w + ["", ""])[:3])
    except OSError as e:
        print("gpu_judge: cannot read %s (%s): no table; counting it a failure" % (tsv, e))
        return 1
    n = dict(PASS=0, FAIL=0, SKIP=0, PLAN=0)
    print("%-20s | %-6s | %s" % ("check", "result", "key numbers"))
    print("%-20s-+-%-6s-+-%s" % ("-" * 20, "-" * 6, "-" * 47))
    for name, res, note in rows:
        print("%-20s | %-6s | %s" % (name, res, note))
        n[res if res in n else "FAIL"] += 1
    print(log_line)
    tail = "%d passed, %d failed, %d skipped" % (n["PASS"], n["FAIL"], n["SKIP"])
    if n["PLAN"]:
        tail += ", %d planned (dry run: nothing ran)" % n["PLAN"]
    print(tail)
    return 1 if n["FAIL"] else 0


USAGE = ("usage: gpu_judge.py served JSON_DIR NAME strict|served | ipc JSON_DIR NAME"
         " | lines NAME FILE | table RESULTS_TSV LOG_LINE")


def main(argv):
    cmds = {"served": (3, lambda a: served(a[0], a[1], a[2])),
            "ipc": (2, lambda a: ipc(a[0], a[1])),
            "lines": (2, lambda a: lines(a[0], a[1])),
            "table": (2, lambda a: table(a[0], a[1]))}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 != cmds[argv[1]][0]:
        print("gpu_judge.py: %s (got: %s); nothing judged" % (USAGE, " ".join(argv[1:]) or "nothing"),
              file=sys.stderr)
        return 2
    if argv[1] == "served" and argv[4] not in ("strict", "served"):
        print("gpu_judge.py: MODE must be strict or served, not '%s'; nothing judged" % argv[4],
              file=sys.stderr)
        return 2
    return cmds[argv[1]][1](argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
