"""torch._inductor.config of the stand-in: the one setting fragpool touches."""
import types

triton = types.SimpleNamespace(cudagraph_trees=True)
