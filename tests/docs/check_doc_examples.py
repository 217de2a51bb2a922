#!/usr/bin/env python3
"""check_doc_examples.py - the `$ fragpool ...` examples in README.md and
docs/*.md run, and print what the docs show.

An example is a line "$ fragpool ARGS" inside a fenced block; the lines
after it, up to the next "$ " line or the end of the block, are the output
it shows.  Each example whose input files are in the repository runs in a
scratch folder (with tests/ linked there, so that "-o report.html" writes
nothing into the tree), through sh, stdout and stderr together, with the
build's fragpool first on PATH.  It must exit 0 (or, when the docs show a
"fragpool ...: " error line first, with any status), and every line it
shows must appear in its output, in order.  A line "..." (alone, or
indented) stands for any lines; times ("0.91 s", "12 ms") may differ.  An
example that needs a file the repository does not have (the user's own
trace) is listed as skipped.

A fenced block right after the line "<!-- check: runs -->" is run whole,
whatever its commands (`build/bin/fragpool-demo-workload`, `LD_PRELOAD=...`):
each line is one command (a "# ..." after it is a comment; a line that
starts with "#" is none, except "#> TEXT", which says that the command
above prints TEXT, in order). They run through sh in a scratch folder where
`build` is the build folder and `tests` and `scripts` are the source's, and
each must exit 0.

Usage: check_doc_examples.py BIN_DIR SOURCE_DIR
Exit status: 0 when every example that ran printed what its docs show and
at least one ran; 1 otherwise, with one line per mismatch.
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

TIME = re.compile(r"\b\d+(?:\.\d+)?\s?(?:s|ms|µs|us|ns)\b")


def examples(path):
    """[(line number, command, [shown output lines])] of one markdown file."""
    out, block, cur = [], False, None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if line.startswith("```"):
                if cur:
                    out.append(cur)
                block, cur = not block, None
                continue
            if not block:
                continue
            if line.startswith("$ "):
                if cur:
                    out.append(cur)
                cmd = line[2:]
                cur = (n, cmd, []) if re.match(r"fragpool\s", cmd) else None
            elif cur:
                cur[2].append(line)
    return out


CHECK_RUNS = "<!-- check: runs -->"


def checked_blocks(path):
    """[(line number, command, [lines it must print])] of the blocks marked CHECK_RUNS."""
    out, state, cur = [], None, None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if state is None:
                state = "marked" if line.strip() == CHECK_RUNS else None
                continue
            if state == "marked":
                state = "in" if line.startswith("```") else None
                continue
            if line.startswith("```"):
                state = None
                continue
            if line.startswith("#> ") and cur:
                cur[2].append(line[3:])
            elif line.strip() and not line.lstrip().startswith("#"):
                cur = (n, re.sub(r"\s+#\s.*$", "", line).strip(), [])
                out.append(cur)
    return out


def run_checked(path, n, cmd, want, src, scratch):
    env = dict(os.environ)
    for k in ("FRAGPOOL_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "LD_PRELOAD"):
        env.pop(k, None)
    r = subprocess.run(["sh", "-c", cmd], cwd=scratch, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    got = r.stdout.decode("utf-8", "replace")
    where = f"{os.path.relpath(path, src)}:{n}: {cmd}"
    if r.returncode != 0:
        return f"{where}: exit status {r.returncode}; its output ends: {got.strip().splitlines()[-1:] or ''}"
    at = 0
    for w in want:
        k = got.find(w, at)
        if k < 0:
            return f"{where}: it does not print {w!r}"
        at = k + len(w)
    return None


def missing_inputs(cmd, src):
    """The repository paths the command names that do not exist."""
    miss = []
    for tok in shlex.split(cmd):
        if "/" in tok and not tok.startswith(("-", ">", "/dev/")) and not os.path.exists(os.path.join(src, tok)):
            miss.append(tok)
    return miss


def norm(line):
    return TIME.sub("T", line.rstrip())


def matches(shown, got):
    """None when every shown line appears in got in order ("..." skips), else the first missing one."""
    lines = [norm(x) for x in got.splitlines()]
    at = 0
    for want in shown:
        if want.strip() in ("...", ""):
            continue
        w = norm(want)
        while at < len(lines) and lines[at] != w:
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


def run_one(path, n, cmd, shown, bin_dir, src, scratch):
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    for k in ("FRAGPOOL_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        env.pop(k, None)
    r = subprocess.run(["sh", "-c", cmd], cwd=scratch, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    got = r.stdout.decode("utf-8", "replace")
    where = f"{os.path.relpath(path, src)}:{n}: $ {cmd}"
    shows_error = bool(shown) and re.match(r"fragpool [a-z]+: ", shown[0] or "") and "error" in shown[0]
    if r.returncode != 0 and not shows_error:
        return f"{where}: exit status {r.returncode}; its output ends: {got.strip().splitlines()[-1:] or ''}"
    miss = matches(shown, got)
    if miss is not None:
        return f"{where}: the docs show a line it does not print: {miss.strip()[:160]!r}"
    return None


def main():
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    bin_dir, src = (os.path.abspath(a) for a in sys.argv[1:])
    files = [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))
    bad, ran, skipped = [], 0, []
    with tempfile.TemporaryDirectory() as scratch:
        os.symlink(os.path.join(src, "tests"), os.path.join(scratch, "tests"))
        os.symlink(os.path.join(src, "scripts"), os.path.join(scratch, "scripts"))
        os.symlink(os.path.dirname(bin_dir), os.path.join(scratch, "build"))
        for path in files:
            for n, cmd, want in checked_blocks(path):
                ran += 1
                err = run_checked(path, n, cmd, want, src, scratch)
                if err:
                    bad.append(err)
        for path in files:
            for n, cmd, shown in examples(path):
                miss = missing_inputs(cmd, src)
                if miss:
                    skipped.append(f"{os.path.relpath(path, src)}:{n} (needs {', '.join(miss)})")
                    continue
                ran += 1
                err = run_one(path, n, cmd, shown, bin_dir, src, scratch)
                if err:
                    bad.append(err)
    for s in skipped:
        print(f"skipped: {s}")
    for b in bad:
        print(b)
    print(f"{ran} examples ran, {len(bad)} differ from their docs, {len(skipped)} skipped")
    return 1 if bad or not ran else 0


if __name__ == "__main__":
    sys.exit(main())
