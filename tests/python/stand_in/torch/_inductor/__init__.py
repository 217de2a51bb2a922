"""torch._inductor of the stand-in: the mode table torch.compile reads."""


def list_mode_options(mode=None, dynamic=None):
    return {"reduce-overhead": {"triton.cudagraphs": True},
            "max-autotune": {"max_autotune": True, "triton.cudagraphs": True}}.get(mode, {})
