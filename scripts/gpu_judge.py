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
  race OUT, pitch-driver OUT, pitch-compare NATIVE_OUT FP_OUT, bench OUT,
  costs OUT, pool OUT, repeat ROW OUT...
                              the key numbers of one check's output, as one
                              line for the table (no newline at the end)

Invariant: nothing here runs a program or touches the GPU; bad input (a
missing file, unreadable JSON) becomes part of the note and a FAIL, never a
traceback.
"""
import glob
import json
import os
import re
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


# ---- the notes: key numbers from a check's output -------------------------
# Each reads one run's output (OUT_DIR/<check>.out) the way the checks print
# it ("RACE ...", "PITCH ...", "BENCH ...", "COST ..." lines) and prints one
# line for the table; a missing file gives what a run without lines gives.

NUM = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def num(s):
    """A string as awk reads it as a number: its numeric prefix, else 0."""
    m = NUM.match(s)
    return float(m.group(0)) if m else 0.0


def fields(path, first=None):
    """The whitespace-split lines of a file (those whose first field is
    first, if given); [] when it cannot be read."""
    try:
        with open(path, errors="replace") as fh:
            rows = [line.split() for line in fh]
    except OSError:
        return []
    return [w for w in rows if first is None or (w and w[0] == first)]


def field(w, i):  # awk's $i: "" past the end
    return w[i - 1] if len(w) >= i else ""


def race_note(path):
    try:
        with open(path, errors="replace") as fh:
            lines = list(fh)
    except OSError:
        return ""
    if not any(line.startswith("RACE variant") for line in lines):
        return ""
    variants = [w for w in fields(path, "RACE") if field(w, 2) == "variant"]
    sens = "\n".join(field(line.split(), 4) for line in lines
                     if line.startswith("RACE sensitivity"))
    n = sum(num(field(w, 5)) for w in variants)
    reuse = "%d/%d" % (sum(num(field(w, 9)) for w in variants), n) if n else ""
    badv = "".join("%s %d/%d; " % (field(w, 3), num(field(w, 7)), num(field(w, 5)))
                   for w in variants if num(field(w, 7)) > 0)
    check = next((line.rstrip("\n")[6:80] for line in lines if line.startswith("CHECK race")), "")
    return "%s; sensitivity %s; B reused A's memory %s%s; " % (
        check, sens or "?", reuse or "?", "; CORRUPTED: " + badv if badv else "")


def pitch_driver(native):
    return "".join("%s->%s " % (field(w, 2), field(w, 3)) for w in fields(native, "PITCH")
                   if field(w, 4) == "runtime")


def pitch_compare(native, fp):
    """"N/M differ[, K missing] FIRST-4-DIFFERENCES": fragpool's pitches
    against the driver's, by (kind, width)."""
    if not (os.path.exists(native) and os.path.exists(fp)):
        return ""  # not compared
    a = {}
    for w in fields(native, "PITCH"):
        a[field(w, 4) + " " + field(w, 2)] = field(w, 3)
    n = seen = miss = 0
    s = ""
    for w in fields(fp, "PITCH"):
        k = field(w, 4) + " " + field(w, 2)
        seen += 1
        if k not in a:
            miss += 1
        elif a[k] != field(w, 3):
            n += 1
            if n <= 4:
                s += "%s w=%s: driver %s, fragpool %s; " % (field(w, 4), field(w, 2), a[k],
                                                            field(w, 3))
    return "%d/%d differ%s %s" % (n, seen, ", %d missing" % miss if miss else "", s)


BENCH_CASES = ("malloc_free 512", "malloc_free 1048576", "malloc_free 8388608",
               "malloc_free 67108864", "malloc_free random128", "mallocasync_freeasync 512",
               "mallocasync_freeasync 67108864", "mallocasync_freeasync random128")


def bench_note(path):
    rows = fields(path, "BENCH")
    if not rows:
        return ""
    v = {}
    for w in rows:
        v[field(w, 2) + " " + field(w, 3)] = field(w, 4)
    return ("malloc+free us: 512B %s, 1MiB %s, 8MiB %s, 64MiB %s, random %s; "
            "async: 512B %s, 64MiB %s, random %s; " % tuple(v.get(k, "") for k in BENCH_CASES))


def costs_note(path):
    parts = ["%s %s ns" % (field(w, 2), field(w, 3)) for w in fields(path, "COST")]
    return ", ".join(parts) + ("; " if parts else "")


def pool_note(path):
    out, t = "", 0
    try:
        with open(path, errors="replace") as fh:
            lines = list(fh)
    except OSError:
        return ""
    for line in lines:
        if line.startswith("live blocks"):
            t = 1
            continue
        if line.startswith("working set"):
            t = 2
            continue
        w = line.split()
        if t == 1 and len(w) == 2:
            out += "%s live %s ns/pair, " % (w[0], w[1])
        elif t == 2 and len(w) == 3:
            out += "load@%s MiB %s ns, " % (w[0], w[2])
    return out


REP_CASES = (("512", "512B"), ("1048576", "1MiB"), ("8388608", "8MiB"), ("67108864", "64MiB"),
             ("536870912", "512MiB"), ("random128", "random"))


def repeat_note(row, paths):
    """"case median [min-max], ..." of the BENCH ROW lines of several runs."""
    v = {}
    for p in paths:
        for w in fields(p, "BENCH"):
            if field(w, 2) == row:
                v.setdefault(field(w, 3), []).append(field(w, 4))
    out = ""
    for key, name in REP_CASES:
        a = sorted((x for x in v.get(key, []) if x), key=num)
        if a:
            out += "%s %s [%s-%s], " % (name, a[(len(a) + 1) // 2 - 1], a[0], a[-1])
    return out


USAGE = ("usage: gpu_judge.py served JSON_DIR NAME strict|served | ipc JSON_DIR NAME"
         " | lines NAME FILE | table RESULTS_TSV LOG_LINE | race OUT | pitch-driver OUT"
         " | pitch-compare NATIVE_OUT FP_OUT | bench OUT | costs OUT | pool OUT"
         " | repeat ROW OUT...")


def say(text):
    sys.stdout.write(text)
    return 0


def main(argv):
    cmds = {"served": (3, lambda a: served(a[0], a[1], a[2])),
            "ipc": (2, lambda a: ipc(a[0], a[1])),
            "lines": (2, lambda a: lines(a[0], a[1])),
            "table": (2, lambda a: table(a[0], a[1])),
            "race": (1, lambda a: say(race_note(a[0]))),
            "pitch-driver": (1, lambda a: say(pitch_driver(a[0]))),
            "pitch-compare": (2, lambda a: say(pitch_compare(a[0], a[1]))),
            "bench": (1, lambda a: say(bench_note(a[0]))),
            "costs": (1, lambda a: say(costs_note(a[0]))),
            "pool": (1, lambda a: say(pool_note(a[0])))}
    if len(argv) >= 4 and argv[1] == "repeat":   # ROW and any number of files
        return say(repeat_note(argv[2], argv[3:]))
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
