"""torch._inductor of the stand-in: only its config."""
