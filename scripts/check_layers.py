#!/usr/bin/env python3
"""scripts/check_layers.py - checks that the code has the shape docs/design.md draws.

Usage: scripts/check_layers.py [repo-root] [--objects BUILD-DIR] [--graph FOLDER]

Six rules, over the C sources of the tree (no build needed):
  (a) no circle between the files of one folder: no file calls (or reads a
      global of) a file that, directly or through others, calls it back;
  (b) no include and no call that points up a layer or sideways to a peer:
      a file may use its own folder and the folders of lower layers (LAYERS);
  (c) one prefix per module: the fp_<word>_ of an exported name (a function
      or global a .c file defines, a function a header declares or defines)
      belongs to one folder, and in shim/ to one module (shim_x.c with its
      shim_x.h), so a name says where it lives;
  (d) every lock of the shim is taken at fork: a shim/ file that holds a
      pthread mutex or rwlock defines a fork handler named in a row of
      ranked_locks (shim/shim_life.c, the one ranked list of locks),
      registers its own with fp_life_rank_lock("<a row's name>", ...), or
      is listed in LOCKS_UNDER (its locks live in objects whose owner's row
      takes them);
  (e) a device's summary groups have one author: FP_DEV_GROUPS in
      report/fp_groups.h (GROUP_TABLE) writes their keys and labels in
      order, and a file that names fp_group fills them through it, so it
      neither indexes a slot by a number (g[2], out->groups[0]) nor spells
      a group's key or label in a string literal of its own ("deferred",
      "Deferred reuse").  A file in GROUP_KNOWN (one that predates the
      table, in a folder someone is still to change) is said on stderr and
      does not fail for the names it lists;
  (f) the path of an allocation stays short (docs/design.md, "The
      allocation path"): the interposer of cuMemAlloc and cuMemFree
      (ALLOC_INTERPOSER) includes only the shim headers ALLOC_INCLUDES and
      calls functions of the allocation core (ALLOC_CORE) only; the core
      calls functions of ALLOC_PATH (the default path) and of ALLOC_ASIDE
      (files it calls only off that path, each with its reason) only.  A
      check of another file that every call makes is a static inline load
      in that file's header, which is no call.
And the layer table of docs/design.md (between its "layers" comments) must
be LAYERS, row for row.
Every violation is one line on stdout; the exit status is 1 when there is
any, 0 otherwise.  A circle listed in KNOWN (one that predates this check,
in a folder someone is still to untangle) is one line on stderr instead and
does not fail; a circle that takes in a file KNOWN does not list fails, and
a KNOWN entry that no longer occurs is said, so the table only shrinks.
--graph FOLDER prints that folder's file graph instead (one
"a.c -> b.c, c.c" line per file) and checks nothing.

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
and sees every direct call or global, but not a call that a macro of a
header spells out (shim_hooks.c names its wrappers through the X-list of
shim_funcs.h).  --objects BUILD-DIR adds what the compiler saw: for each
object file BUILD-DIR/<dir>/CMakeFiles/<target>.dir/<file>.c.o that is
newer than its source, the global symbols it leaves undefined (nm -u) are
uses and those it defines are definitions.  scripts/test.sh passes its
build folder.  tests/ may use anything and is not
scanned, nor is a build tree (a folder with CMakeCache.txt or CMakeFiles/);
a folder holding C files that is not in LAYERS is itself reported,
so a new folder must be placed in the table before it passes.
"""
import os
import re
import subprocess
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
    ["replay"],           # trace, replay, tune, the verdict on a run
    ["shim"],             # LD_PRELOAD: the pool in programs, advice at an OOM
    ["cli"],              # the fragpool command
]
ONLY = {"simdev": ["base"]}   # the simulated driver: the ABI, nothing else
ANY = ["tests"]

# Circles that predate this check, by folder: the files each may span.  A
# circle within these files is said on stderr and passes; delete an entry
# when its folder is untangled (the check says when it no longer occurs).
# Empty: the circles of cli/ and simdev/ this check once found are gone.
KNOWN = {}
SKIP = ["build", ".git", ".ci", "cmake", "docs", "scripts"]

SRC_EXT = (".c", ".h")
PREFIX = re.compile(r"(fp_[a-z0-9]+)_\w")
DECLARED = re.compile(r"^[A-Za-z_][\w \t*]*?\b(fp_[a-z0-9]+_\w*)\s*\(", re.M)
ONE_MODULE = ["shim"]   # folders where a prefix belongs to one file pair
LOCK_DECL = re.compile(r"\bpthread_(?:mutex|rwlock)_t\s+\**\s*\w+")
RANK_ROW = re.compile(r'\{\s*"([^"]+)"\s*,\s*(\w+)\s*,\s*(\w+)\s*\}')
# Shim files whose locks another row takes: each pool's deferral and VMM
# state, and the capture gate, are taken by the "device pools" row.
LOCKS_UNDER = {"shim/shim_defer.c": "device pools", "shim/shim_pages.c": "device pools",
               "shim/shim_streams.c": "device pools"}
# Rule (e): the one table of the device's groups, its rows X(ID, "key",
# "label", omit), and a slot indexed by a number (not a declaration's size).
GROUP_TABLE = "report/fp_groups.h"
GROUP_ROW = re.compile(r'\bX\(\s*(\w+)\s*,\s*"([^"]*)"\s*,\s*"([^"]*)"\s*(?:,\s*\d\s*)?\)')
GROUP_SLOT = re.compile(r"\b(?:g|groups)\s*\[\s*\d+\s*\]")
# Files that write a group's names themselves since before the table, and
# the names each may write: said on stderr, not failing; the check says
# when an entry is no longer needed.  fp_replay_trace_group (replay/) names
# the "trace" group it fills; fp_report_group_set checks the names agree.
GROUP_KNOWN = {}
# Rule (f): the files one allocation and free may run code of.
ALLOC_INTERPOSER = "shim/shim_mem.c"
ALLOC_INCLUDES = {"shim_core.h", "shim_life.h", "shim_real.h", "shim_state.h"}
ALLOC_CORE = "shim/shim_core.c"
ALLOC_PATH = {"shim/shim_pools.c", "shim/shim_defer.c"}
ALLOC_ASIDE = {
    "shim/shim_advice.c": "at an OOM",
    "shim/shim_trace.c": "while trace:PATH records",
    "shim/shim_snaprec.c": "while snapshot:PATH records",
    "shim/shim_mempool.c": "for stream-ordered blocks (cuMemAllocAsync)",
    "shim/shim_state.c": "fp_say, at an invalid free or a refused capture",
    "shim/shim_lend.c": "once per device (joining lending) and at an OOM (the ask)",
}
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


def strip(text, directives=False):
    """Blanks comments, literals and preprocessor lines (directives: keeps
    those); keeps newlines and every character's place."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if not directives and (line_start and c == "#" or (line_start and c in " \t" and
                                                           text[i:].lstrip(" \t").startswith("#"))):
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
        if re.match(r"\s*(?:struct|union|enum)\s+\w+\s*\{", head):
            continue   # struct tag { members }; defines a type, no global
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


def blank_aggregates(code):
    """code with the bodies of struct, union and enum definitions blanked:
    their members are declarations, not uses."""
    out, i = [], 0
    for m in re.finditer(r"\b(?:struct|union|enum)\s*[A-Za-z_]?\w*\s*\{", code):
        if m.start() < i:
            continue
        depth, j = 0, m.end() - 1
        while j < len(code):
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
            if depth == 0:
                break
        out.append(code[i:m.end()])
        out.append(re.sub(r"[^\n]", " ", code[m.end():j - 1]))
        i = j - 1
    out.append(code[i:])
    return "".join(out)


def statics(code):
    """The names that code defines at file scope as static: they shadow any
    global of the same name elsewhere."""
    names = set()
    for head, body in top_level_chunks(code):
        head = drop_attributes(head)
        if not re.search(r"\bstatic\b", head):
            continue
        m = re.search(r"([A-Za-z_]\w*)\s*\((?:[^()]|\([^()]*\))*\)\s*$", head) if body else None
        if m:
            names.add(m.group(1))
        elif not body:
            decl = re.sub(r"\[[^\]]*\]", "", head.split("=")[0])
            m = re.search(r"([A-Za-z_]\w*)\s*(?:\((?:[^()]|\([^()]*\))*\))?\s*$", decl)
            if m:
                names.add(m.group(1))
    return names


def uses(code):
    """Every identifier of code that is not a member after "." or "->", nor
    a member declared in a struct, nor one of its own statics."""
    own = statics(code)
    code = blank_aggregates(code)
    found = set()
    for m in IDENT.finditer(code):
        if m.group(0) in own:
            continue
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
        if top in SKIP or top.startswith(".") or top in ANY or \
           "CMakeCache.txt" in filenames or "CMakeFiles" in dirnames:
            dirnames[:] = []   # not ours, or a build tree (build-asan/, ...)
            continue
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(SRC_EXT):
                rel = os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")
                with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                    files[rel] = f.read()
    return files


def resolve_include(rel, inc, by_name, allowed):
    """The headers that #include "inc" of rel may mean: the one beside it,
    else every header of that name, those of folders rel may use first."""
    found = [f for f in by_name.get(os.path.basename(inc), []) if f.endswith(inc)]
    here = os.path.normpath(os.path.join(os.path.dirname(rel), inc)).replace(os.sep, "/")
    if here in found:
        return [here]
    ok = [f for f in found if folder_of(f) in allowed.get(folder_of(rel), ())]
    return ok or found


def object_symbols(root, build, files):
    """{source: (defined, undefined)} from the object files under build that
    are newer than their source, by nm; {} without nm or objects."""
    out = {}
    for dirpath, _, filenames in os.walk(build):
        parts = os.path.relpath(dirpath, build).replace(os.sep, "/").split("/")
        if "CMakeFiles" not in parts:
            continue
        k = parts.index("CMakeFiles")
        if len(parts) <= k + 1 or not parts[k + 1].endswith(".dir"):
            continue
        for name in filenames:
            if not name.endswith(".c.o"):
                continue
            inner = [".." if q == "__" else q for q in parts[k + 2:]]
            src = os.path.normpath(os.path.join(*(parts[:k] + inner + [name[:-2]])))
            src = src.replace(os.sep, "/")
            obj = os.path.join(dirpath, name)
            if src not in files or src in out or \
               os.path.getmtime(obj) < os.path.getmtime(os.path.join(root, src)):
                continue
            try:
                text = subprocess.run(["nm", obj], capture_output=True, text=True,
                                      check=True).stdout
            except (OSError, subprocess.CalledProcessError):
                return {}
            defined, undefined = set(), set()
            for line in text.splitlines():
                f = line.split()
                if len(f) == 3 and f[1] in "TDBRCGSV":
                    defined.add(f[2])
                elif len(f) == 2 and f[0] == "U":
                    undefined.add(f[1])
            out[src] = (defined, undefined)
    return out


def build_edges(files, objects=None):
    """edges[a] = {b: why}; the uses of every file, resolved.  objects: what
    object_symbols found, added to what the sources say."""
    objects = objects or {}
    allowed = allowed_map()
    by_name = {}
    for rel in files:
        by_name.setdefault(os.path.basename(rel), []).append(rel)
    codes = {rel: strip(text) for rel, text in files.items()}
    defs = {}
    for rel, code in codes.items():
        if rel.endswith(".c"):
            for name in definitions(code) | objects.get(rel, (set(), set()))[0]:
                defs.setdefault(name, []).append(rel)
    edges = {rel: {} for rel in files}
    for rel, text in files.items():
        for inc in INCLUDE.findall(text):
            for target in resolve_include(rel, inc, by_name, allowed):
                if target != rel:
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
        used = (uses(codes[rel]) - visible) | objects.get(rel, (set(), set()))[1]
        for name in sorted(used):
            owners = defs.get(name, [])
            if not owners or rel in owners:
                continue
            same = [o for o in owners if os.path.dirname(o) == os.path.dirname(rel)]
            ok = [o for o in owners if folder_of(o) in allowed.get(folder_of(rel), ())]
            for o in same or ok or owners:
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


def doc_layers(root):
    """The rows of the layer table in docs/design.md, as lists of folders,
    or None when there is no such table."""
    try:
        with open(os.path.join(root, "docs", "design.md"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"<!-- layers\b.*?-->(.*?)<!-- /layers -->", text, re.S)
    if not m:
        return None
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            rows.append(re.findall(r"`([^`]+)`", cells[1]))
    return rows


def prefix_owners(files):
    """{prefix: files}: the files that define or declare a name of each fp_ prefix."""
    own = {}
    for rel, text in files.items():
        code = strip(text)
        names = set(definitions(code)) if rel.endswith(".c") else set()
        if rel.endswith(".h"):
            names |= {m.group(1) for m in DECLARED.finditer(code)
                      if not m.group(0).lstrip().startswith(("return", "else"))}
        for name in names:
            m = PREFIX.match(name)
            if m:
                own.setdefault(m.group(1), set()).add(rel)
    return own


def prefix_problems(files):
    """Rule (c): a prefix in two folders, or in two modules of a ONE_MODULE folder."""
    problems = []
    for prefix, owners in sorted(prefix_owners(files).items()):
        folders = sorted({folder_of(r) for r in owners})
        if len(folders) > 1:
            problems.append(f"{prefix}_: names of one prefix in {len(folders)} folders "
                            f"({', '.join(sorted(owners))}); one prefix per module")
            continue
        stems = sorted({os.path.splitext(r)[0] for r in owners})
        if folders[0] in ONE_MODULE and len(stems) > 1:
            problems.append(f"{prefix}_: names of one prefix in {len(stems)} modules of "
                            f"{folders[0]}/ ({', '.join(sorted(owners))}); one prefix per module")
    return problems


def functions(code):
    """The names of the non-static functions that code defines."""
    names = set()
    for head, body in top_level_chunks(code):
        head = drop_attributes(head)
        if not body or {"static", "typedef", "extern"} & set(IDENT.findall(head)):
            continue
        m = re.search(r"([A-Za-z_]\w*)\s*\((?:[^()]|\([^()]*\))*\)\s*$", head)
        if m:
            names.add(m.group(1))
    return names


def calls_into(files, rel):
    """{file: a function of it}: the other shim/ files whose functions rel names."""
    owner = {}
    for other, text in files.items():
        if other != rel and other.startswith("shim/") and other.endswith(".c"):
            for name in functions(strip(text)):
                owner.setdefault(name, other)
    found = {}
    for name in sorted(uses(strip(files[rel]))):
        if name in owner:
            found.setdefault(owner[name], name)
    return found


def alloc_problems(files):
    """Rule (f): the allocation interposer's includes and calls, and the
    core's calls, outside their lists."""
    if ALLOC_INTERPOSER not in files:
        return []
    problems = []
    for inc in INCLUDE.findall(files[ALLOC_INTERPOSER]):
        name = os.path.basename(inc)
        if name.startswith("shim_") and name not in ALLOC_INCLUDES:
            problems.append(f"{ALLOC_INTERPOSER}: includes {name}; the allocation interposer "
                            f"includes only {', '.join(sorted(ALLOC_INCLUDES))} of shim/ "
                            f"(ALLOC_INCLUDES): what it needs goes through {ALLOC_CORE}")
    for dst, name in sorted(calls_into(files, ALLOC_INTERPOSER).items()):
        if dst != ALLOC_CORE:
            problems.append(f"{ALLOC_INTERPOSER} -> {dst} (uses {name}): the allocation "
                            f"interposer calls {ALLOC_CORE} only")
    if ALLOC_CORE not in files:
        return problems
    for dst, name in sorted(calls_into(files, ALLOC_CORE).items()):
        if dst not in ALLOC_PATH and dst not in ALLOC_ASIDE:
            problems.append(f"{ALLOC_CORE} -> {dst} (uses {name}): the allocation path runs "
                            f"code of {', '.join(sorted(ALLOC_PATH))} only; make a check "
                            f"every call makes a static inline load in the header, or list "
                            f"a call off that path in ALLOC_ASIDE with its reason")
    return problems


def ranked_rows(files):
    """[(name, prepare, after)] of ranked_locks in shim/shim_life.c, or None."""
    text = files.get("shim/shim_life.c")
    m = re.search(r"ranked_locks\[\]\s*=\s*\{(.*?)\n\};", text or "", re.S)
    return RANK_ROW.findall(m.group(1)) if m else None


def lock_problems(files):
    """Rule (d): a shim lock that no ranked row takes at fork."""
    rows = ranked_rows(files)
    if rows is None:
        return []
    names = {r[0] for r in rows}
    handlers = {h for r in rows for h in r[1:]} - {"NULL"}
    problems = []
    for rel, text in sorted(files.items()):
        if not rel.startswith("shim/") or not rel.endswith(".c") or rel == "shim/shim_life.c":
            continue
        code = strip(text)
        if not LOCK_DECL.search(code):
            continue
        registered = re.findall(r'fp_life_rank_lock\(\s*"([^"]*)"', text)
        unknown = [r for r in registered if r not in names]
        for r in unknown:
            problems.append(f'{rel}: fp_life_rank_lock("{r}") names no row of ranked_locks '
                            f"(shim/shim_life.c)")
        if unknown or definitions(code) & handlers or registered or \
           LOCKS_UNDER.get(rel) in names:
            continue
        problems.append(f"{rel}: holds a lock that no row of ranked_locks (shim/shim_life.c) "
                        f"takes at fork; add a row with its handlers, or register them with "
                        f"fp_life_rank_lock")
    return problems


def group_names(files):
    """{name: what} of the keys and labels of GROUP_TABLE's rows, or None
    when the tree has no table."""
    text = files.get(GROUP_TABLE)
    if text is None:
        return None
    names = {}
    for gid, key, label in GROUP_ROW.findall(text):
        names[key] = f"the key of FP_GROUP_{gid}"
        names[label] = f"the label of FP_GROUP_{gid}"
    return names


def string_literals(text):
    """[(line, content)] of the string literals of text outside comments."""
    code = strip(text, directives=True)
    return [(code.count("\n", 0, m.start()) + 1, text[m.start() + 1:m.end() - 1])
            for m in re.finditer(r'"[^"\n]*"', code)]


def declares(code, at):
    """True when the name at index at is declared (fp_group g[4], int *g[2]),
    not used (x = g[4], p->groups[0], &g[1], return g[1]): a type's name
    comes before it.  (n * g[1] reads as a declaration too.)"""
    before = code[:at].rstrip().rstrip("*").rstrip()
    word = re.search(r"[A-Za-z_]\w*$", before)
    return bool(word) and word.group(0) not in KEYWORDS | {"case", "else", "do", "goto"}


def group_slots(rel, code):
    """Rule (e)'s lines for the group slots code indexes by a number."""
    return [f"{rel}:{code.count(chr(10), 0, m.start()) + 1}: {' '.join(m.group(0).split())} "
            f"indexes a group slot by its number; use FP_GROUP_<ID> of {GROUP_TABLE} "
            f"(fp_report_group_set)"
            for m in GROUP_SLOT.finditer(code) if not declares(code, m.start())]


def group_literals(rel, text, names):
    """Rule (e)'s (problems, notes) for the literals of text that are a
    group's key or label; GROUP_KNOWN's are notes."""
    known = GROUP_KNOWN.get(rel, set())
    problems, notes = [], []
    for line, lit in string_literals(text):
        if lit not in names:
            continue
        where = f'{rel}:{line}: "{lit}" is {names[lit]}'
        if lit in known:
            notes.append(f"known, not failing (GROUP_KNOWN in scripts/check_layers.py): {where}")
        else:
            problems.append(f"{where}; only {GROUP_TABLE} writes it (FP_DEV_GROUPS)")
    if known and not notes:
        notes.append(f"{rel} names no group of {GROUP_TABLE} any more: delete its "
                     f"GROUP_KNOWN entry in scripts/check_layers.py")
    return problems, notes


def group_problems(files):
    """Rule (e): (problems, notes) of the files that name fp_group and
    write a group slot's number or a group's name of their own."""
    names = group_names(files)
    if names is None:
        return [], []
    problems, notes = [], []
    if not names:
        problems.append(f"{GROUP_TABLE}: no X(ID, \"key\", \"label\", omit) row in FP_DEV_GROUPS")
    for rel, text in sorted(files.items()):
        code = strip(text)
        if rel == GROUP_TABLE or not re.search(r"\bfp_group\b", code):
            continue
        more, said = group_literals(rel, text, names)
        problems += group_slots(rel, code) + more
        notes += said
    return problems, notes


def check(root, build=None):
    """(problems, notes): the lines that fail the check, and those that do not."""
    files = scan(root)
    allowed = allowed_map()
    edges = build_edges(files, object_symbols(root, build, files) if build else None)
    problems, notes = [], []
    table = doc_layers(root)
    if table is not None and table != LAYERS:
        problems.append(f"docs/design.md: its layer table {table} differs from LAYERS in "
                        f"scripts/check_layers.py {LAYERS}; make them one")
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
    problems += prefix_problems({r: t for r, t in files.items() if folder_of(r) in allowed})
    problems += lock_problems(files)
    problems += alloc_problems(files)
    more, said = group_problems(files)
    problems += more
    notes += said
    by_dir = {}
    for rel in edges:
        by_dir.setdefault(os.path.dirname(rel), []).append(rel)
    for d, members in sorted(by_dir.items()):
        inside = {m: {w: y for w, y in edges[m].items() if os.path.dirname(w) == d}
                  for m in members}
        known = KNOWN.get(d, set())
        comps = circles(inside)
        for comp in comps:
            path = cycle_path(comp, inside)
            steps = " -> ".join(f"{os.path.basename(a)} ({inside[a][b]})"
                                for a, b in zip(path, path[1:]))
            line = f"{d}/: circle of {len(comp)} files: {steps} -> " \
                   f"{os.path.basename(path[-1])}"
            if {os.path.basename(m) for m in comp} <= known:
                notes.append(f"known, not failing (KNOWN in scripts/check_layers.py): {line}")
            else:
                problems.append(line)
        if d in KNOWN and not comps and members:
            notes.append(f"{d}/ has no circle any more: delete its KNOWN entry in "
                         f"scripts/check_layers.py")
    return problems, notes


def graph(root, folder, build=None):
    files = scan(root)
    edges = build_edges(files, object_symbols(root, build, files) if build else None)
    for rel in sorted(edges):
        if os.path.dirname(rel) == folder.rstrip("/"):
            inside = sorted(os.path.basename(w) for w in edges[rel]
                            if os.path.dirname(w) == os.path.dirname(rel))
            print(f"{os.path.basename(rel)} -> {', '.join(inside) if inside else '(nothing)'}")


def main(argv):
    args = list(argv)
    opts = {}
    for flag, example in (("--graph", "--graph shim"), ("--objects", "--objects build")):
        if flag in args:
            i = args.index(flag)
            if i + 1 >= len(args):
                print(f"check_layers: {flag} needs a folder, e.g. {example}", file=sys.stderr)
                return 2
            opts[flag] = args[i + 1]
            del args[i:i + 2]
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print("check_layers: usage: check_layers.py [repo-root] [--objects BUILD-DIR] "
              "[--graph FOLDER]", file=sys.stderr)
        return 2
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    build = opts.get("--objects")
    for what, d in (("repo-root", root), ("--objects", build)):
        if d is not None and not os.path.isdir(d):
            print(f"check_layers: {what} '{d}' is not a directory", file=sys.stderr)
            return 2
    if "--graph" in opts:
        graph(root, opts["--graph"], build)
        return 0
    problems, notes = check(root, build)
    for n in notes:
        print("check_layers: " + n, file=sys.stderr)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
