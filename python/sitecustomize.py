"""sitecustomize for `fragpool run`: puts fragpool's Python side in place
(python/fragpool), then runs the sitecustomize this one stands in front
of, if there is one further along sys.path.

Invariant: nothing here can stop the program: any error is one line on
stderr.
"""
import os
import sys


def _fragpool_chain():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import fragpool  # noqa: F401
    except Exception as e:
        sys.stderr.write(f"fragpool: its Python side failed to load ({e!r}); "
                         "torch.cuda's memory API stays PyTorch's own\n")
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    try:
        mod = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = mod
        spec.loader.exec_module(mod)
    except Exception as e:
        sys.stderr.write(f"fragpool: the next sitecustomize ({spec.origin}) failed: {e!r}\n")


_fragpool_chain()
del _fragpool_chain
