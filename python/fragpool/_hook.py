"""fragpool._hook - run a function right after a module is imported, so
that fragpool's Python side costs nothing until the program imports torch.

after_import(name, fn): when name is imported (now, if it already is),
fn(module) runs once, just after the module's own code.  A finder on
sys.meta_path wraps the loader that the other finders choose; it never
changes which file is loaded.

Invariant: fn never runs twice for one name, and an error inside fn is
one line on stderr: the program's import goes on.
"""
import importlib.abc
import sys

_pending = {}


def _run(name, module):
    fn = _pending.pop(name, None)
    if fn is None:
        return
    try:
        fn(module)
    except Exception as e:  # never break the program's import
        sys.stderr.write(f"fragpool: setting up for {name} failed ({e!r}); "
                         "torch.cuda's memory API stays PyTorch's own\n")


class _After(importlib.abc.Loader):
    def __init__(self, loader, name):
        self._loader, self._name = loader, name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        spec = module.__spec__
        spec.loader = self._loader  # the module keeps its own loader
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        _run(self._name, module)

    def __getattr__(self, attr):
        return getattr(self._loader, attr)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _After(spec.loader, name)
                return spec
        return None


_finder = _Finder()


def after_import(name, fn):
    if name in sys.modules:
        _pending[name] = fn
        _run(name, sys.modules[name])
        return
    _pending[name] = fn
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
