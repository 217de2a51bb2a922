#!/usr/bin/env python3
"""gpu_budget.py - the smallest free GPU memory a program completes in.

  scripts/gpu_budget.py --name NAME --lo MIB --hi MIB [options] -- CMD ARGS...

For a budget B, a ballast process (tests/gpu/ballast.py, run without
LD_PRELOAD and without PyTorch's or fragpool's settings) takes all of the
GPU's memory except B MiB and prints READY; then CMD runs, with the
environment of this script plus every --env K=V, and the ballast is killed
when CMD ends.  B is bisected between --lo and --hi to --resolution MiB:
  - hi is tried first; if CMD does not complete there, the answer is "none";
  - lo is assumed not to fit, and is tried at the end only if every budget
    above it completed (then it may be the answer);
  - a run "completes" when it exits 0 (and prints --ok-text, if given);
    exit status 3 or out-of-memory text in its output is "oom"; a run past
    its time limit is "timeout"; anything else is "fail".  Every one of
    these counts as "does not fit", and the trial lines say which it was.
"{B}" in any --env value or CMD argument is replaced by the budget, and
BUDGET_MIB=B is set for CMD.  Each trial's output goes to
--log-dir/NAME-B<budget>.out.

Output, one line each:
  TRIAL <name> <budget MiB> <ok|oom|timeout|fail> rc <rc> secs <s> free_mib <F> nvml_free_mib <N>
  BUDGET <name> <smallest MiB that completed|none> <largest MiB that failed|none>
  BUDGET_DETAIL <json: bounds, trials, whether the bisection finished>
and the same JSON in --json.  The whole thing stops by --deadline seconds:
a trial that could not finish in the time left is not started, and the
result says "complete": false.  Exit status 0 when it finished, 2 when the
deadline, --max-iters or a ballast failure cut it short, 1 on bad usage.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BALLAST = os.path.join(ROOT, "tests", "gpu", "ballast.py")
OOM_RE = re.compile(r"out of memory|CHECK \S+ OOM|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|"
                    r"CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation", re.I)
# The ballast must be a plain process: none of the settings of the program under test.
CLEAN = ("LD_PRELOAD", "FRAGPOOL_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF",
         "PYTORCH_ALLOC_CONF")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                usage="%(prog)s --name NAME --lo MIB --hi MIB [options] -- CMD ARGS...")
    p.add_argument("--name", required=True)
    p.add_argument("--lo", type=int, required=True, help="lower bound, MiB (assumed not to fit)")
    p.add_argument("--hi", type=int, required=True, help="upper bound, MiB (tried first)")
    p.add_argument("--resolution", type=int, default=256, help="MiB (default 256)")
    p.add_argument("--max-iters", type=int, default=12, help="trials at most (default 12)")
    p.add_argument("--deadline", type=float, default=600, help="seconds for everything (default 600)")
    p.add_argument("--run-timeout", type=float, default=180, help="seconds for one trial's CMD (default 180)")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="for CMD only; repeatable")
    p.add_argument("--ok-text", default="", help="CMD's output must hold this to complete")
    p.add_argument("--log-dir", default="/tmp/fragpool-budget")
    p.add_argument("--json", default="", help="write the result here too")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--ballast", default=BALLAST)
    p.add_argument("--probe", action="store_true",
                   help="first run CMD once without a ballast, and narrow lo/hi to "
                        "0.45*P .. P+1024 MiB, P = its NVML_PEAK_MB - NVML_BASE_MB")
    p.add_argument("--no-ballast", action="store_true",
                   help="testing: run CMD without a ballast (the budget is only in BUDGET_MIB)")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.cmd and a.cmd[0] == "--":
        a.cmd = a.cmd[1:]
    if not a.cmd:
        p.error("no command after --")
    if a.resolution < 1 or a.lo < 0 or a.hi <= a.lo:
        p.error("need 0 <= lo < hi and resolution >= 1")
    for e in a.env:
        if "=" not in e:
            p.error(f"--env {e!r}: not K=V")
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", a.name):
        p.error("--name: letters, digits, _ . + - only")
    return a


def nvml_free_mib(device):
    try:
        import pynvml
        pynvml.nvmlInit()
        vis = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        tok = vis[device] if device < len(vis) else ""
        if tok.startswith(("GPU-", "MIG-")):
            h = pynvml.nvmlDeviceGetHandleByUUID(tok)
        else:
            h = pynvml.nvmlDeviceGetHandleByIndex(int(tok) if tok.isdigit() else device)
        return pynvml.nvmlDeviceGetMemoryInfo(h).free / 2**20
    except Exception:  # noqa: BLE001 - NVML is only for the record
        return None


def kill_group(proc, sig=signal.SIGTERM, wait_s=10):
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except OSError:
        pass
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()


class Ballast:
    def __init__(self, a, budget):
        self.a, self.budget, self.proc = a, budget, None
        self.ready = {}

    def start(self, timeout_s=90):
        env = {k: v for k, v in os.environ.items() if k not in CLEAN}
        self.proc = subprocess.Popen(
            [sys.executable, self.a.ballast, "--leave-mib", str(self.budget), "--device", str(self.a.device),
             "--until-stdin-eof"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        t0 = time.monotonic()
        lines = []
        while time.monotonic() - t0 < timeout_s:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip())
            if line.startswith("READY"):
                f = line.split()
                self.ready = {f[i]: f[i + 1] for i in range(1, len(f) - 1, 2)}
                return True
            if line.startswith("BALLAST FAIL"):
                break
        self.error = " | ".join(lines[-3:]) or f"no READY within {timeout_s}s"
        self.stop()
        return False

    def stop(self):
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        kill_group(self.proc)
        self.proc = None


def wait_released(device, want_mib, limit_s=10):
    """After a ballast or a run exits, wait until NVML shows the memory back."""
    if want_mib is None:
        time.sleep(0.5)
        return
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        f = nvml_free_mib(device)
        if f is None or f >= want_mib:
            return
        time.sleep(0.2)


def trial(a, budget, time_left, base_free, probe=False):
    """One run of CMD with `budget` MiB free (probe: no ballast). Returns the trial's record."""
    rec = {"budget_mib": budget, "result": None, "rc": None, "secs": 0.0,
           "free_mib": None, "nvml_free_mib": None, "note": ""}
    tag = "probe" if probe else str(budget)
    sub = lambda s: s.replace("{B}", tag)  # noqa: E731
    env = dict(os.environ)
    for e in a.env:
        k, v = e.split("=", 1)
        env[k] = sub(v)
    env["BUDGET_MIB"] = tag
    cmd = [sub(c) for c in a.cmd]
    log = os.path.join(a.log_dir, f"{a.name}-B{tag}.out")
    ballast = None
    t0 = time.monotonic()
    try:
        if probe:
            wait_released(a.device, None if base_free is None else base_free - 1024)
        elif not a.no_ballast:
            wait_released(a.device, None if base_free is None else base_free - 1024)
            ballast = Ballast(a, budget)
            if not ballast.start(timeout_s=min(90, max(10, time_left - 10))):
                rec["result"] = "ballast_fail"
                rec["note"] = ballast.error
                return rec
            rec["free_mib"] = float(ballast.ready.get("free_mib", "nan"))
            nf = ballast.ready.get("nvml_free_mib", "na")
            rec["nvml_free_mib"] = None if nf == "na" else float(nf)
            if rec["free_mib"] > budget + 64:
                rec["note"] = f"the device has only {rec['free_mib']:.0f} MiB free"
        limit = max(1.0, min(a.run_timeout, time_left - (time.monotonic() - t0) - 5))
        with open(log, "w") as out:
            out.write(f"# budget {budget} MiB; ballast {ballast.ready if ballast else 'none'}\n")
            out.write(f"# cmd {cmd}\n")
            out.flush()
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                rc = 124
        rec["rc"] = rc
        with open(log, errors="replace") as f:
            text = f.read()
        if rc == 124:
            rec["result"] = "timeout"
            rec["note"] = (rec["note"] + f" killed after {limit:.0f}s").strip()
        elif rc == 0 and (not a.ok_text or a.ok_text in text):
            rec["result"] = "ok"
            vals = dict(ln.split()[:2] for ln in text.splitlines()
                        if ln.startswith(("NVML_PEAK_MB ", "NVML_BASE_MB ")) and len(ln.split()) >= 2)
            try:
                rec["nvml_used_mib"] = float(vals["NVML_PEAK_MB"]) - float(vals["NVML_BASE_MB"])
            except (KeyError, ValueError):
                pass
        elif rc == 3 or OOM_RE.search(text):
            rec["result"] = "oom"
        else:
            rec["result"] = "fail"
            tail = [ln for ln in text.splitlines() if ln.strip()][-1:] or [""]
            rec["note"] = (rec["note"] + " " + tail[0][:160]).strip()
        return rec
    finally:
        if ballast is not None:
            ballast.stop()
        rec["secs"] = round(time.monotonic() - t0, 1)


def bisect(a, run_trial, clock=time.monotonic, out=print):
    """The search; run_trial(budget, time_left) -> record. Returns the result dict."""
    t_start = clock()
    res = a.resolution
    lo = a.lo // res * res
    hi = -(-a.hi // res) * res
    good, bad = None, None          # smallest that completed, largest that failed
    bad_assumed = lo
    trials, stop = [], ""

    def time_left():
        return a.deadline - (clock() - t_start)

    def go(b):
        nonlocal good, bad
        est = max([t["secs"] for t in trials] + [0]) * 1.15 + 5
        if trials and est > time_left():
            return None, f"deadline: {time_left():.0f}s left, a trial takes ~{est:.0f}s"
        if len(trials) >= a.max_iters:
            return None, f"max-iters {a.max_iters} reached"
        r = run_trial(b, time_left())
        trials.append(r)
        out(f"TRIAL {a.name} {b} {r['result']} rc {r['rc']} secs {r['secs']} "
            f"free_mib {r['free_mib']} nvml_free_mib {r['nvml_free_mib']}"
            + (f" ({r['note']})" if r.get("note") else ""))
        sys.stdout.flush()
        if r["result"] == "ballast_fail":
            return r, "the ballast failed: " + r.get("note", "")
        if r["result"] == "ok":
            good = b if good is None else min(good, b)
        else:
            bad = b if bad is None else max(bad, b)
        return r, ""

    r, stop = go(hi)
    if not stop and r is not None and r["result"] == "ok":
        while not stop:
            floor = bad if bad is not None else bad_assumed
            if good - floor <= res:
                if bad is None and good > lo:   # everything above lo completed: try lo
                    r, stop = go(lo)
                    if r is not None and r["result"] == "ok":
                        bad = None
                break
            mid = (good + floor) // 2 // res * res
            if mid <= floor or mid >= good:
                break
            r, stop = go(mid)
    floor = bad if bad is not None else bad_assumed
    complete = bool(trials) and not stop and (good is None or good <= lo or good - floor <= res)
    return {
        "name": a.name, "lo": lo, "hi": hi, "resolution": res,
        "smallest_ok_mib": good,
        "largest_failed_mib": bad,
        "largest_failed_assumed": bad is None and good is not None and good > lo,
        "complete": complete,
        "stopped": stop, "secs": round(clock() - t_start, 1), "trials": trials,
        "cmd": a.cmd, "env": a.env,
    }


def main(argv=None):
    a = parse_args(argv)
    os.makedirs(a.log_dir, exist_ok=True)
    base = None if a.no_ballast else nvml_free_mib(a.device)
    print(f"BUDGET_START {a.name} lo {a.lo} hi {a.hi} resolution {a.resolution} deadline {a.deadline}s "
          f"nvml_free_mib {base if base is None else round(base)} cmd {' '.join(a.cmd)}", flush=True)

    def on_term(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    probe = None
    try:
        if a.probe:
            t0 = time.monotonic()
            probe = trial(a, None, a.deadline, base, probe=True)
            a.deadline -= time.monotonic() - t0
            used = probe.get("nvml_used_mib")
            print(f"PROBE {a.name} {probe['result']} rc {probe['rc']} secs {probe['secs']} "
                  f"nvml_used_mib {used}", flush=True)
            if probe["result"] == "ok" and used:
                res = a.resolution
                hi = min(a.hi, int(-(-(used + 1024) // res) * res))
                lo = max(a.lo, int(used * 0.45) // res * res)
                if lo < hi:
                    a.lo, a.hi = lo, hi
                    print(f"PROBE {a.name} bounds now {a.lo}..{a.hi} MiB", flush=True)
        result = bisect(a, lambda b, left: trial(a, b, left, base))
        result["probe"] = probe
    except KeyboardInterrupt:
        print(f"BUDGET {a.name} none none (interrupted)", flush=True)
        return 2
    good, bad = result["smallest_ok_mib"], result["largest_failed_mib"]
    if good is not None and bad is None and result["largest_failed_assumed"]:
        bad_txt = f"{result['lo']}?"
    else:
        bad_txt = "none" if bad is None else str(bad)
    print(f"BUDGET {a.name} {'none' if good is None else good} {bad_txt}"
          + ("" if result["complete"] else f" (incomplete: {result['stopped'] or 'see trials'})"))
    print("BUDGET_DETAIL " + json.dumps(result, sort_keys=True))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
    return 0 if result["complete"] else 2


if __name__ == "__main__":
    sys.exit(main())
