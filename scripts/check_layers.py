#!/usr/bin/env python3
"""scripts/check_layers.py - checks that the code has the shape docs/design.md draws.

Usage: scripts/check_layers.py [repo-root] [--graph FOLDER]

Two rules, over the C sources of the tree (no build needed):
  (a) no circle between the files of one folder: no file calls (or reads a
      global of) a file that, directly or through others, calls it back;
  (b) no include and no call that points up a layer or sideways to a peer:
      a file may use its own folder and the folders of lower layers (LAYERS).
Every violation is one line on stdout; the exit status is 1 when there is
any, 0 otherwise.  --graph FOLDER prints that folder's file graph instead
(one "a.c -> b.c, c.c" line per file) and checks nothing.

How it reads the code (plain regular expressions, python3's stdlib only):
  * Comments, string and character literals and preprocessor lines are
    blanked first, so a name in a comment or a message is not a use.
  * A file DEFINES the non-static functions (a name, its parameter list,
    then "{" at brace depth 0) and the non-static, non-extern globals
    (a declaration at depth 0 that is not a prototype or a typedef) that
    it holds at top level.
  * A file USES every identifier in its text that another file defines,
    except after "." or "->" (a struct member such as fp_real.cuMemFree_v2
    is not the exported cuMemFree_v2).  A use of a name defined in several
    files resolves to the one in the same folder when there is one, and
    otherwise breaks a rule only when no definer is allowed (the shim and
    simdev/ both define cuMemAlloc_v2, and each uses its own).
  * #include "x.h" resolves to the header beside the file, else to the one
    header of that name elsewhere in the tree (system headers <...> are
    not ours).  Header-to-header includes count as edges too.
This over-approximates a little (a name passed to a macro counts as a use)
and never misses a direct call or global, which is the safe side for a check
whose every report a person reads.  tests/ may use anything and is not
scanned; a folder holding C files that is not in LAYERS is itself reported,
so a new folder must be placed in the table before it passes.
"""
import os
import re
import sys

# The layer order, lowest first: a folder may use its own files and those
# of every folder in an earlier row.  Folders in one row are peers and must
# not use each other.  ONLY names folders that stand beside the order and
# may use exactly the folders listed; ANY may use everything.
LAYERS = [
    ["base"],             # the driver ABI, shared by everything
    ["pool"],             # the allocator core: plain C11, no CUDA
    ["config"],           # FRAGPOOL_CONF: the option table, the parser
    ["report"],           # the summary, the OOM message, merge
    ["shim", "replay"],   # the two clients of the pool: LD_PRELOAD, offline
    ["cli"],              # the fragpool command
]
ONLY = {"simdev": ["base"]}   # the simulated driver: the ABI, nothing else
ANY = ["tests"]
SKIP = ["build", ".git", ".ci", "cmake", "docs", "scripts"]

SRC_EXT = (".c", ".h")
IDENT = re.compile(r"[A-Za-z_]\w*")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
KEYWORDS = set("""if while for switch return sizeof _Alignof alignof
    _Static_assert static_assert __attribute__ __typeof__ typeof defined""".split())


def allowed_map():
    allowed = {}
    below = []
    for row in LAYERS:
        for folder in row:
            allowed[folder] = set(below) | {folder}
        below += row
    for folder, uses in ONLY.items():
        allowed[folder] = set(uses) | {folder}
    return allowed


def strip(text):
    """Blanks comments, literals and preprocessor lines; keeps newlines."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#" or (line_start and c in " \t" and
                                       text[i:].lstrip(" \t").startswith("#")):
            j = i
            while j < n:   # the directive with its continuation lines
                k = text.find("\n", j)
                k = n if k < 0 else k
                if k > 0 and text[k - 1] == "\\":
                    j = k + 1
                    continue
                break
            out.append(re.sub(r"[^\n]", " ", text[i:k]))
            i = k
            continue
        if text.startswith("/*", i):
            k = text.find("*/", i + 2)
            k = n if k < 0 else k + 2
            out.append(re.sub(r"[^\n]", " ", text[i:k]))
            i = k
            continue
        if text.startswith("//", i):
            k = text.find("\n", i)
            k = n if k < 0 else k
            out.append(" " * (k - i))
            i = k
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c)
            i = j + 1
            line_start = False
            continue
        out.append(c)
        line_start = c == "\n" or (line_start and c in " \t")
        i += 1
    return "".join(out)


def top_level_chunks(code):
    """Splits code into its top-level declarations: (head, body) where head
    is the text before a depth-0 "{" (or the whole declaration) and body
    the braced part ("" for none)."""
    chunks, depth, start, brace_at = [], 0, 0, -1
    for i, c in enumerate(code):
        if c == "{":
            if depth == 0:
                brace_at = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                head = code[start:brace_at]
                if re.search(r"\)\s*$", head) and "=" not in head:
                    chunks.append((head, code[brace_at:i + 1]))   # a function
                    start = i + 1
        elif c == ";" and depth == 0:
            chunks.append((code[start:i], ""))
            start = i + 1
    return chunks


def drop_attributes(s):
    while True:
        m = re.search(r"__attribute__\s*\(\(", s)
        if not m:
            return s
        depth, j = 0, m.end() - 2
        while j < len(s):
            depth += {"(": 1, ")": -1}.get(s[j], 0)
            j += 1
            if depth == 0:
                break
        s = s[:m.start()] + " " + s[j:]


def definitions(code):
    """The names of the non-static functions and globals that code defines."""
    names = set()
    for head, body in top_level_chunks(code):
        head = drop_attributes(head)
        words = IDENT.findall(head)
        if not words or {"static", "typedef", "extern"} & set(words):
            continue
        if body:   # a function definition: the name before its parameters
            m = re.search(r"([A-Za-z_]\w*)\s*\((?:[^()]|\([^()]*\))*\)\s*$", head)
            if m:
                names.add(m.group(1))
            continue
        decl = head.split("=")[0]
        if "(" in decl and not re.search(r"\(\s*\*", decl):
            continue   # a prototype
        for part in decl.split(","):   # int a, b[4];
            part = re.sub(r"\[[^\]]*\]", "", part)
            ids = [w for w in IDENT.findall(part) if w not in KEYWORDS]
            if ids and (len(ids) > 1 or names):
                names.add(ids[-1])
    return names


def type_names(code):
    """The typedef names and struct, union and enum tags that code declares."""
    names = set(m.group(2) for m in re.finditer(r"\b(struct|union|enum)\s+([A-Za-z_]\w*)", code))
    for head, _ in top_level_chunks(code):
        if not re.search(r"\btypedef\b", head):
            continue
        m = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", head)   # typedef r (*name)(...)
        ids = IDENT.findall(re.sub(r"\[[^\]]*\]", "", head))
        names.add(m.group(1) if m else ids[-1])
    return names


def uses(code):
    """Every identifier of code that is not a member after "." or "->"."""
    found = set()
    for m in IDENT.finditer(code):
        before = code[:m.start()].rstrip()
        if before.endswith(".") or before.endswith("->"):
            continue
        found.add(m.group(0))
    return found


def folder_of(rel):
    return rel.split("/", 1)[0] if "/" in rel else ""


def scan(root):
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        top = "" if rel_dir == "." else rel_dir.split(os.sep)[0]
        if top in SKIP or top.startswith(".") or top in ANY:
            dirnames[:] = []
            continue
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(SRC_EXT):
                rel = os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")
                with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                    files[rel] = f.read()
    return files


def resolve_include(rel, inc, by_name):
    here = os.path.normpath(os.path.join(os.path.dirname(rel), inc)).replace(os.sep, "/")
    if here in by_name.get(os.path.basename(inc), []):
        return here
    found = by_name.get(os.path.basename(inc), [])
    return found[0] if len(found) == 1 else None


def build_edges(files):
    """edges[a] = {b: why}; the uses of every file, resolved."""
    by_name = {}
    for rel in files:
        by_name.setdefault(os.path.basename(rel), []).append(rel)
    codes = {rel: strip(text) for rel, text in files.items()}
    defs = {}
    for rel, code in codes.items():
        if rel.endswith(".c"):
            for name in definitions(code):
                defs.setdefault(name, []).append(rel)
    edges = {rel: {} for rel in files}
    for rel, text in files.items():
        for inc in INCLUDE.findall(text):
            target = resolve_include(rel, inc, by_name)
            if target and target != rel:
                edges[rel].setdefault(target, "includes " + os.path.basename(target))
    types = {rel: type_names(code) for rel, code in codes.items()}
    for rel in files:
        if not rel.endswith(".c"):
            continue
        visible = set()   # the types of the file and of what it includes
        seen, todo = set(), [rel]
        while todo:
            f = todo.pop()
            if f in seen:
                continue
            seen.add(f)
            visible |= types[f]
            todo += [t for t in edges[f] if t.endswith(".h")]
        for name in sorted(uses(codes[rel]) - visible):
            owners = defs.get(name, [])
            if not owners or rel in owners:
                continue
            same = [o for o in owners if os.path.dirname(o) == os.path.dirname(rel)]
            for o in same or owners:
                edges[rel].setdefault(o, "uses " + name)
    return edges


def circles(edges):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def cycle_path(comp, edges):
    """One circle through the component's first file, as a -> b -> a."""
    members = set(comp)
    start = comp[0]
    prev, queue = {start: None}, [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v]):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                path.reverse()
                return path + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp + [start]


def check(root):
    files = scan(root)
    allowed = allowed_map()
    edges = build_edges(files)
    problems = []
    for folder in sorted({folder_of(r) for r in files}):
        if folder and folder not in allowed:
            problems.append(f"{folder}/: a folder of C files that LAYERS in "
                            f"scripts/check_layers.py does not place")
    for rel in sorted(edges):
        src = folder_of(rel)
        if src not in allowed:
            continue
        for dst, why in sorted(edges[rel].items()):
            tgt = folder_of(dst)
            if tgt in allowed[src]:
                continue
            kind = "sideways to a peer" if any(src in row and tgt in row for row in LAYERS) \
                else "up a layer"
            problems.append(f"{rel} -> {dst} ({why}): {kind}, {src}/ may use only "
                            f"{', '.join(sorted(allowed[src]))}/")
    by_dir = {}
    for rel in edges:
        by_dir.setdefault(os.path.dirname(rel), []).append(rel)
    for d, members in sorted(by_dir.items()):
        inside = {m: {w: y for w, y in edges[m].items() if os.path.dirname(w) == d}
                  for m in members}
        for comp in circles(inside):
            path = cycle_path(comp, inside)
            steps = " -> ".join(f"{os.path.basename(a)} ({inside[a][b]})"
                                for a, b in zip(path, path[1:]))
            problems.append(f"{d}/: circle of {len(comp)} files: {steps} -> "
                            f"{os.path.basename(path[-1])}")
    return problems


def graph(root, folder):
    edges = build_edges(scan(root))
    for rel in sorted(edges):
        if os.path.dirname(rel) == folder.rstrip("/"):
            inside = sorted(os.path.basename(w) for w in edges[rel]
                            if os.path.dirname(w) == os.path.dirname(rel))
            print(f"{os.path.basename(rel)} -> {', '.join(inside) if inside else '(nothing)'}")


def main(argv):
    args = list(argv)
    folder = None
    if "--graph" in args:
        i = args.index("--graph")
        if i + 1 >= len(args):
            print("check_layers: --graph needs a folder, e.g. --graph shim", file=sys.stderr)
            return 2
        folder = args[i + 1]
        del args[i:i + 2]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if not os.path.isdir(root):
        print(f"check_layers: '{root}' is not a directory", file=sys.stderr)
        return 2
    if folder:
        graph(root, folder)
        return 0
    problems = check(root)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
