"""common.py - what every part of scripts/bench.sh shares: the machine's
description (date, GPU, driver, CUDA version, commit, host, CPU), the part
file format, timing helpers and the one-line error for bad input.

A part file (OUT/<part>.json) is
  {"fragpool_bench": 1, "part": NAME, "meta": {...}, "status": "ok" | "partial" | "failed",
   "budget_s": S, "elapsed_s": S, "notes": [str, ...], "data": {...}}
Invariant: a part file is written whole (to a temporary name, then renamed),
so a part cut short by its time limit leaves either nothing or a file that
says "partial".
"""
import datetime
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time

FORMAT = 1
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class BadInput(Exception):
    """Input we refuse; the message is the one line the user sees."""


def run_text(cmd, timeout=30):
    """stdout of cmd, stripped, or '' when it is missing or fails."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def commit():
    env = os.environ.get("BENCH_COMMIT")
    if env:
        return env
    head = run_text(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    if not head:
        return "unknown (no git; set BENCH_COMMIT)"
    dirty = subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD"],
                           capture_output=True).returncode != 0
    return head + ("+dirty" if dirty else "")


def gpu_info():
    q = run_text(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                  "--format=csv,noheader"])
    info = {"gpu": None, "gpu_count": 0, "driver": None, "gpu_memory": None, "cuda": None}
    lines = [ln for ln in q.splitlines() if ln.strip()]
    if lines:
        f = [x.strip() for x in lines[0].split(",")]
        info.update(gpu=f[0], gpu_count=len(lines), driver=f[1] if len(f) > 1 else None,
                    gpu_memory=f[2] if len(f) > 2 else None)
    m = re.search(r"CUDA Version:\s*([\d.]+)", run_text(["nvidia-smi"]))
    if m:
        info["cuda"] = m.group(1)
    m = re.search(r"release ([\d.]+)", run_text(["nvcc", "--version"]))
    info["nvcc"] = m.group(1) if m else None
    return info


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def meta():
    m = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
         "commit": commit(), "host": socket.gethostname(), "cpu": cpu_model(),
         "cpus": os.cpu_count()}
    m.update(gpu_info())
    return m


def write_doc(path, doc):
    """doc as JSON at path, whole: written to a temporary name, then renamed."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def write_part(out_dir, name, data, status, budget_s, t0, notes):
    doc = {"fragpool_bench": FORMAT, "part": name, "meta": meta(), "status": status,
           "invocation": os.environ.get("BENCH_INVOCATION"),
           "budget_s": budget_s, "elapsed_s": round(time.time() - t0, 1), "notes": notes,
           "data": data}
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name + ".json")
    write_doc(path, doc)
    print(f"bench {name}: {status}, {doc['elapsed_s']} s, wrote {path}")
    for n in notes:
        print(f"bench {name}: note: {n}")
    return path


def read_json(path, what):
    """The JSON document at path; BadInput naming the file and the problem."""
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise BadInput(f"cannot read {what} {path}: {e.strerror}") from None
    except ValueError as e:
        raise BadInput(f"{what} {path} is not valid JSON ({e})") from None


def as_text(x):
    """Output captured by subprocess (bytes after a timeout, even with text=True)."""
    return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def need_exe(path, what):
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise BadInput(f"no {what} at {path} (build it first: scripts/bench.sh builds it)")
    return path


def which(name):
    return shutil.which(name)


def main_guard(fn):
    """Run fn(); a BadInput becomes its one line on stderr and exit status 2."""
    try:
        return fn()
    except BadInput as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
