#!/usr/bin/env python3
"""tests/test_check_layers.py - scripts/check_layers.py on small made-up trees.

Each case writes a tree of a few C files into a temporary folder, runs the
check on it as CI does (a separate python3 process) and looks at the exit
status and the lines: a clean tree passes silently; a circle, an include or
a call up a layer, a call to a peer, simdev/ beyond base/, an unplaced
folder, a name prefix in two folders (or two modules of shim/), a shim
lock that no row of ranked_locks takes at fork, and a device group's slot
written by number or its key or label in a literal outside report/'s
table each fail with one line that names the files; comments, strings,
struct members, static functions and type names are not uses; KNOWN
circles pass only while they stay within their files, and an entry whose
circle is gone is said (these run check() in-process with a made-up KNOWN
table, as the real one is empty); --objects finds a call that only a macro
spells out.  Run: python3 tests/test_check_layers.py
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "check_layers.py")


def layers_module():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import check_layers
    finally:
        sys.path.pop(0)
    return check_layers


def check_known(root, known, table="KNOWN"):
    """(problems, notes) of check_layers.check(root) with the table of
    exceptions named (KNOWN, GROUP_KNOWN) set to known."""
    mod = layers_module()
    saved = getattr(mod, table)
    setattr(mod, table, known)
    try:
        return mod.check(root)
    finally:
        setattr(mod, table, saved)


def run(root, *args):
    p = subprocess.run([sys.executable, SCRIPT, root, *args], capture_output=True, text=True)
    return p.returncode, p.stdout.splitlines(), p.stderr.splitlines()


class Tree:
    def __init__(self, files):
        self.root = tempfile.mkdtemp(prefix="fp_layers_")
        for rel, text in files.items():
            self.write(rel, text)

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def close(self):
        shutil.rmtree(self.root)


CLEAN = {
    "base/fp_cuda.h": "typedef int CUresult;\n",
    "pool/fp_pool.h": '#include "fp_cuda.h"\nint fp_pool_alloc(int n);\n',
    "pool/pool.c": '#include "fp_pool.h"\nint fp_pool_alloc(int n) { return n; }\n',
    "pool/pool_map.c": '#include "fp_pool.h"\nint pool_map_put(int n) { return fp_pool_alloc(n); }\n',
    "config/fp_conf.h": "int fp_conf_parse(const char *s);\n",
    "config/fp_conf.c": '#include "fp_conf.h"\n#include "fp_pool.h"\n'
                        "int fp_conf_parse(const char *s) { return fp_pool_alloc(*s); }\n",
    "shim/shim_state.c": "int fp_state_flag;\nstatic int helper(void) { return 1; }\n"
                         "int fp_state_get(void) { return helper() + fp_state_flag; }\n",
    "shim/shim_life.c": "int fp_state_get(void);\nint fp_shim_init(void) { return fp_state_get(); }\n",
    "simdev/sim.c": '#include "fp_cuda.h"\nCUresult cuInit(unsigned f) { return (CUresult)f; }\n',
    "tests/test_x.c": '#include "fp_conf.h"\nint main(void) { return fp_shim_init(); }\n',
}


class CheckLayers(unittest.TestCase):
    def tree(self, extra=None, drop=()):
        files = {k: v for k, v in CLEAN.items() if k not in drop}
        files.update(extra or {})
        t = Tree(files)
        self.addCleanup(t.close)
        return t

    def fails_with(self, extra, *words, drop=()):
        rc, out, err = run(self.tree(extra, drop).root)
        self.assertEqual(rc, 1, f"expected a failure, got {out} {err}")
        self.assertEqual(len(out), 1, out)
        for w in words:
            self.assertIn(w, out[0])
        return out[0]

    def test_clean_tree_passes(self):
        rc, out, err = run(self.tree().root)
        self.assertEqual((rc, out, err), (0, [], []))

    def test_circle_of_two_files(self):
        line = self.fails_with({"pool/pool_map.c": "int pool_map_put(int n) { return fp_pool_alloc(n); }\n",
                                "pool/pool.c": "int fp_pool_alloc(int n) { return pool_map_put(n); }\n"},
                               "pool/: circle of 2 files", "pool.c", "pool_map.c")
        self.assertIn("uses pool_map_put", line)

    def test_circle_through_a_global_of_three_files(self):
        self.fails_with({"shim/a.c": "int fp_a(void) { return fp_b(); }\n",
                         "shim/b.c": "int fp_b(void) { return fp_c; }\n",
                         "shim/c.c": "int fp_c = 1;\nint fp_cc(void) { return fp_a(); }\n"},
                        "shim/: circle of 3 files", "a.c", "b.c", "c.c")

    def test_prefix_in_two_folders(self):
        self.fails_with({"report/fp_emit.c": "int fp_pool_size(void) { return 1; }\n"},
                        "fp_pool_: names of one prefix in 2 folders", "report/fp_emit.c",
                        "pool/pool.c")

    def test_prefix_in_two_shim_modules(self):
        self.fails_with({"shim/shim_other.h": "int fp_state_other(void);\n"},
                        "fp_state_: names of one prefix in 2 modules of shim/",
                        "shim/shim_other.h", "shim/shim_state.c")

    def test_prefix_over_files_of_one_module_or_pool_passes(self):
        # a shim module's header and source are one module; pool/ is one
        # module of several files (fp_pool.h, pool.c, pool_more.c)
        rc, out, err = run(self.tree({
            "shim/shim_state.h": "int fp_state_get(void);\n",
            "pool/pool_more.c": '#include "fp_pool.h"\nint fp_pool_more(int n) { return n; }\n',
        }).root)
        self.assertEqual((rc, out), (0, []))

    LIFE = ("int fp_state_get(void);\nint fp_shim_init(void) { return fp_state_get(); }\n"
            "static struct { const char *name; void (*prepare)(void); void (*after)(int); }\n"
            "ranked_locks[] = {\n"
            '    {"summary", fp_summary_fork_prepare, fp_summary_fork_after},\n'
            '    {"device pools", fp_pools_fork_prepare, fp_pools_fork_after},\n'
            '    {"IPC opens", NULL, NULL},\n'
            "};\n")
    SUMMARY = ("#include <pthread.h>\nstatic pthread_mutex_t lock;\n"
               "void fp_summary_fork_prepare(void) { pthread_mutex_lock(&lock); }\n"
               "void fp_summary_fork_after(int c) { (void)c; }\n")

    def test_locks_taken_at_fork_pass(self):
        # a row's handlers, a registration by a row's name, a LOCKS_UNDER file
        rc, out, err = run(self.tree({
            "shim/shim_life.c": self.LIFE, "shim/shim_summary.c": self.SUMMARY,
            "shim/shim_ipc.c": '#include <pthread.h>\nstatic pthread_mutex_t open_lock;\n'
                               'void fp_ipc_setup(void) { fp_life_rank_lock("IPC opens", 0, 0); }\n',
            "shim/shim_defer.c": "#include <pthread.h>\nstruct fp_defer { pthread_mutex_t lock; };\n",
        }).root)
        self.assertEqual((rc, out), (0, []))

    def test_lock_no_row_takes(self):
        self.fails_with({"shim/shim_life.c": self.LIFE, "shim/shim_summary.c": self.SUMMARY,
                         "shim/shim_cache.c": "#include <pthread.h>\n"
                                              "static pthread_rwlock_t cache_lock;\n"},
                        "shim/shim_cache.c: holds a lock that no row of ranked_locks")

    def test_lock_registered_under_a_name_no_row_has(self):
        self.fails_with({"shim/shim_life.c": self.LIFE, "shim/shim_summary.c": self.SUMMARY,
                         "shim/shim_ipc.c": '#include <pthread.h>\nstatic pthread_mutex_t l;\n'
                                            'void fp_ipc_setup(void) '
                                            '{ fp_life_rank_lock("IPC close", 0, 0); }\n'},
                        'shim/shim_ipc.c: fp_life_rank_lock("IPC close") names no row')

    GROUPS = ('#include "fp_report.h"\n#define FP_DEV_GROUPS(X) \\\n'
              '    X(DEFERRED, "deferred", "Deferred reuse") \\\n'
              '    X(TRACE, "trace", "Trace problems")\n')

    def test_groups_through_the_table_pass(self):
        # by FP_GROUP_<ID>; a declaration's size, a comment, a file that
        # does not name fp_group (a config word, another struct's g[0]) pass
        rc, out, err = run(self.tree({
            "report/fp_groups.h": self.GROUPS,
            "shim/shim_summary.c": '/* the "deferred" group, g[1] */\n'
                                   "static fp_group g[2];\n"
                                   "static void fill(const fp_group *w) "
                                   "{ fp_report_group_set(g, FP_GROUP_DEFERRED, w); }\n",
            "cli/cli.h": "typedef struct rep { fp_group groups[4]; fp_group *more[2]; } rep;\n",
            "config/fp_conf.c": '#include "fp_conf.h"\n'
                                'static const char *const words[] = {"deferred", "sync"};\n'
                                "int fp_conf_parse(const char *s) { return s == words[0]; }\n",
            "pool/pool_record.c": "struct r { int g[2]; };\n"
                                  "static int gen(struct r *r) { return r->g[0]; }\n",
        }).root)
        self.assertEqual((rc, out, err), (0, [], []))

    def test_group_slot_by_number(self):
        self.fails_with({"report/fp_groups.h": self.GROUPS,
                         "cli/cmd_replay.c": "struct rep { fp_group groups[2]; };\n"
                                             "static void fill(struct rep *o) "
                                             "{ o->groups[1] = (fp_group){0}; }\n"},
                        "cli/cmd_replay.c:2: groups[1] indexes a group slot by its number",
                        "FP_GROUP_<ID> of report/fp_groups.h")

    def test_group_name_in_a_literal(self):
        self.fails_with({"report/fp_groups.h": self.GROUPS,
                         "shim/shim_summary.c": "static fp_group g;\n"
                                                'static void fill(void) { g.key = "deferred"; }\n'},
                        'shim/shim_summary.c:2: "deferred" is the key of FP_GROUP_DEFERRED',
                        "only report/fp_groups.h writes it")
        # a label counts too, and a macro does not hide it
        self.fails_with({"report/fp_groups.h": self.GROUPS,
                         "cli/cmd_replay.c": '#define LABEL "Trace problems"\n'
                                             "static fp_group g = {.label = LABEL};\n"},
                        'cli/cmd_replay.c:1: "Trace problems" is the label of FP_GROUP_TRACE')

    def test_group_known_file_passes_and_a_gone_one_is_said(self):
        known = {"replay/fp_replay.c": {"trace"}}
        tree = {"report/fp_groups.h": self.GROUPS,
                "replay/fp_replay.c": 'void fp_replay_group(fp_group *g) { g->key = "trace"; }\n'}
        problems, notes = check_known(self.tree(tree).root, known, "GROUP_KNOWN")
        self.assertEqual(problems, [])
        self.assertEqual(len(notes), 1, notes)
        self.assertIn("known, not failing (GROUP_KNOWN", notes[0])
        self.assertIn('replay/fp_replay.c:1: "trace" is the key of FP_GROUP_TRACE', notes[0])
        # a name the entry does not list still fails
        tree["replay/fp_replay.c"] = 'void fp_replay_group(fp_group *g) { g->key = "deferred"; }\n'
        problems, notes = check_known(self.tree(tree).root, known, "GROUP_KNOWN")
        self.assertEqual(len(problems), 1, problems)
        self.assertEqual(notes, ["replay/fp_replay.c names no group of report/fp_groups.h any "
                                 "more: delete its GROUP_KNOWN entry in scripts/check_layers.py"])

    ALLOC = {
        "shim/shim_pools.c": "int fp_pools_take(int n) { return n; }\n",
        "shim/shim_trace.c": "int fp_tracer_row(int n) { return n; }\n",
        "shim/shim_core.c": '#include "shim_pools.h"\nint fp_pools_take(int n);\n'
                            "int fp_tracer_row(int n);\n"
                            "int fp_core_alloc(int n) { return fp_pools_take(n) + fp_tracer_row(n); }\n",
        "shim/shim_mem.c": '#include "shim_core.h"\n#include "shim_life.h"\n'
                           "int fp_core_alloc(int n);\n"
                           "int cuMemAlloc_v2(int n) { return fp_core_alloc(n); }\n",
    }

    def test_alloc_path_passes(self):
        # the interposer over the core, the core over the pools and a
        # file it calls off the default path (ALLOC_ASIDE)
        rc, out, err = run(self.tree(self.ALLOC).root)
        self.assertEqual((rc, out, err), (0, [], []))

    def test_alloc_interposer_includes_another_shim_header(self):
        self.fails_with(dict(self.ALLOC, **{"shim/shim_mem.c": self.ALLOC["shim/shim_mem.c"] +
                                            '#include "shim_pools.h"\n'}),
                        "shim/shim_mem.c: includes shim_pools.h", "ALLOC_INCLUDES")

    def test_alloc_interposer_calls_past_the_core(self):
        self.fails_with(dict(self.ALLOC, **{"shim/shim_mem.c": self.ALLOC["shim/shim_mem.c"] +
                                            "int fp_mem_more(void) { return fp_pools_take(1); }\n"}),
                        "shim/shim_mem.c -> shim/shim_pools.c (uses fp_pools_take)",
                        "calls shim/shim_core.c only")

    def test_alloc_core_calls_a_file_off_its_lists(self):
        self.fails_with(dict(self.ALLOC, **{
            "shim/shim_clock.c": "int fp_time_begin(void) { return 0; }\n",
            "shim/shim_core.c": self.ALLOC["shim/shim_core.c"] +
                                "int fp_core_more(void) { return fp_time_begin(); }\n"}),
                        "shim/shim_core.c -> shim/shim_clock.c (uses fp_time_begin)",
                        "static inline", "ALLOC_ASIDE")

    def test_include_up_a_layer(self):
        self.fails_with({"pool/pool.c": '#include "fp_conf.h"\nint fp_pool_alloc(int n) { return n; }\n'},
                        "pool/pool.c -> config/fp_conf.h", "includes fp_conf.h", "up a layer")

    def test_call_up_a_layer(self):
        self.fails_with({"pool/pool.c": "int fp_pool_alloc(int n) { return fp_conf_parse(0) + n; }\n"},
                        "pool/pool.c -> config/fp_conf.c", "uses fp_conf_parse", "up a layer")

    def test_replay_may_not_call_the_shim(self):
        # the shim uses replay/ (the OOM's verdict), never the other way
        self.fails_with({"replay/fp_replay.c": "int fp_replay(void) { return fp_shim_init(); }\n"},
                        "replay/fp_replay.c -> shim/shim_life.c", "up a layer")

    def test_simdev_uses_only_base(self):
        self.fails_with({"simdev/sim.c": '#include "fp_cuda.h"\n#include "fp_pool.h"\n'
                                         "CUresult cuInit(unsigned f) { return (CUresult)f; }\n"},
                        "simdev/sim.c -> pool/fp_pool.h", "simdev/ may use only base, simdev/")

    def test_unplaced_folder(self):
        self.fails_with({"extra/x.c": "int fp_x(void) { return 0; }\n"},
                        "extra/", "does not place")

    def test_design_table_must_match(self):
        table = ("<!-- layers -->\n| layer | folders | may use |\n| --- | --- | --- |\n"
                 "| 0 | `base` | - |\n| 1 | `pool` | base |\n| 2 | `config` | |\n"
                 "| 3 | `report` | |\n| 4 | `replay` | |\n| 5 | `shim` | |\n| 6 | `cli` | |\n"
                 "<!-- /layers -->\n")
        self.assertEqual(run(self.tree({"docs/design.md": table}).root)[:2], (0, []))
        self.fails_with({"docs/design.md": table.replace("| 4 | `replay` | |\n", "")},
                        "docs/design.md", "differs from LAYERS")

    def test_build_trees_are_not_sources(self):
        t = self.tree({"build-asan/CMakeCache.txt": "",
                       "build-asan/CMakeFiles/x/CMakeCCompilerId.c": "int main(int argc) { return argc; }\n",
                       "cli/main.c": "int main(int argc, char **argv) { (void)argv; return argc; }\n"})
        self.assertEqual(run(t.root)[:2], (0, []))

    def test_tests_may_use_anything(self):
        self.assertEqual(run(self.tree({"tests/t.c": '#include "fp_pool.h"\n#include "fp_conf.h"\n'
                                        "int fp_pool_alloc(int n) { return fp_shim_init() + n; }\n"}).root)[0], 0)

    def test_what_is_not_a_use(self):
        code = ('/* pool_map_put() is called back here, in a comment */\n'
                'struct fp_be { int (*pool_map_put)(int); };\n'
                'typedef int fp_shim_init;\n'
                'static int fp_conf_parse(int n) { return n; }\n'
                'int fp_pool_alloc(int n) {\n'
                '    struct fp_be be = {0}; fp_shim_init z = 0;\n'
                '    const char *say = "pool_map_put"; (void)say; (void)be.pool_map_put;\n'
                '    return fp_conf_parse(n) + z;\n}\n')
        self.assertEqual(run(self.tree({"pool/pool.c": code}).root)[:2], (0, []))

    def test_the_same_name_in_two_folders_resolves_to_the_allowed_one(self):
        # simdev/ and shim/ both define the driver's cuInit; shim uses its own.
        rc, out, _ = run(self.tree({"shim/shim_mem.c": "CUresult cuInit(unsigned f) { return 0; }\n",
                                    "shim/shim_hooks.c": "void *fp_hook(void) { return (void *)cuInit; }\n"}).root)
        self.assertEqual((rc, out), (0, []))

    def test_known_circle_passes_and_a_grown_one_fails(self):
        # KNOWN is empty in the tree; the mechanism runs with a made-up entry.
        known = {"shim": {"shim_a.c", "shim_b.c"}}
        circle = {"shim/shim_a.c": "int fp_a(void) { return fp_b(); }\n",
                  "shim/shim_b.c": "int fp_b(void) { return fp_a(); }\n"}
        problems, notes = check_known(self.tree(circle).root, known)
        self.assertEqual(problems, [])
        self.assertEqual(len(notes), 1, notes)
        self.assertIn("known, not failing", notes[0])
        self.assertIn("shim/: circle of 2 files", notes[0])
        circle["shim/shim_c.c"] = "int fp_c(void) { return fp_a(); }\n"
        circle["shim/shim_b.c"] = "int fp_b(void) { return fp_c(); }\n"
        problems, notes = check_known(self.tree(circle).root, known)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("shim/: circle of 3 files", problems[0])
        self.assertEqual(notes, [])

    def test_known_entry_without_its_circle_is_said(self):
        problems, notes = check_known(self.tree().root, {"pool": {"pool.c", "pool_map.c"}})
        self.assertEqual(problems, [])
        self.assertEqual(notes, ["pool/ has no circle any more: delete its KNOWN entry "
                                 "in scripts/check_layers.py"])

    def test_objects_show_a_call_a_macro_hides(self):
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        nm = shutil.which("nm")
        if not cc or not nm:
            self.skipTest("needs cc and nm")
        t = self.tree({"shim/shim_list.h": "#define FP_LIST(X) X(fp_wrap)\nint fp_wrap(void);\n",
                       "shim/shim_wrap.c": "int fp_back(void);\n"
                                          "int fp_wrap(void) { return fp_back(); }\n",
                       "shim/shim_hook.c": '#include "shim_list.h"\n#define CALL(n) n() +\n'
                                           "int fp_back(void) { return FP_LIST(CALL) 0; }\n"})
        self.assertEqual(run(t.root)[0], 0)   # the sources alone do not show it
        objdir = os.path.join(t.root, "build", "shim", "CMakeFiles", "fragpool.dir")
        os.makedirs(objdir)
        for name in ("shim_wrap.c", "shim_hook.c"):
            subprocess.run([cc, "-c", os.path.join(t.root, "shim", name), "-o",
                            os.path.join(objdir, name + ".o")], check=True)
        rc, out, _ = run(t.root, "--objects", os.path.join(t.root, "build"))
        self.assertEqual(rc, 1)
        self.assertIn("shim/: circle of 2 files", out[0])
        # An object older than its source is stale and not read.
        src = os.path.join(t.root, "shim", "shim_hook.c")
        later = os.path.getmtime(os.path.join(objdir, "shim_hook.c.o")) + 10
        os.utime(src, (later, later))
        self.assertEqual(run(t.root, "--objects", os.path.join(t.root, "build"))[0], 0)

    def test_bad_arguments(self):
        rc, out, err = run(os.path.join(tempfile.gettempdir(), "fp_layers_no_such_dir"))
        self.assertEqual((rc, out), (2, []))
        self.assertIn("is not a directory", err[0])
        rc, _, err = run(self.tree().root, "--graph")
        self.assertEqual(rc, 2)
        self.assertIn("--graph needs a folder", err[0])

    def test_graph(self):
        # shim_life.c's prototype of fp_state_get is a use, not a definition.
        rc, out, _ = run(self.tree().root, "--graph", "shim")
        self.assertEqual(rc, 0)
        self.assertEqual(out, ["shim_life.c -> shim_state.c", "shim_state.c -> (nothing)"])


if __name__ == "__main__":
    unittest.main()
