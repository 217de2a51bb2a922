"""host_dataloader.py - a PyTorch DataLoader with pin_memory=True, run under
fragpool by tests/gpu/host_check.sh.

Each sample is a deterministic tensor (its index in every element, plus a
ramp); batches come from 2 worker processes, are pinned by the DataLoader's
pin-memory thread (cudaHostAlloc through PyTorch's host allocator), copied to
the GPU with non_blocking=True, and checked there against the expected sums.
Prints "DATALOADER ok batches=N pinned=N" or "DATALOADER FAIL ...".
"""
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Ramp(Dataset):
    def __init__(self, n, width):
        self.n, self.width = n, width

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        # sizes vary by sample so that pinned buffers come in several sizes
        w = self.width + (i % 7) * 4096
        return torch.full((w,), float(i)), i


def collate(items):
    width = max(t.numel() for t, _ in items)
    out = torch.zeros(len(items), width)
    for k, (t, _) in enumerate(items):
        out[k, : t.numel()] = t
    return out, torch.tensor([i for _, i in items])


def main():
    torch.manual_seed(0)
    dl = DataLoader(Ramp(512, 1 << 16), batch_size=16, num_workers=2, pin_memory=True,
                    collate_fn=collate)
    batches = pinned = 0
    for x, idx in dl:
        pinned += int(x.is_pinned())
        g = x.to("cuda", non_blocking=True)
        want = torch.tensor([float(i) * (65536 + (int(i) % 7) * 4096) for i in idx],
                            device="cuda")
        got = g.sum(dim=1)
        if not torch.allclose(got, want):
            print("DATALOADER FAIL batch", batches, "sums differ")
            return 1
        batches += 1
    torch.cuda.synchronize()
    if pinned != batches:
        print("DATALOADER FAIL only", pinned, "of", batches, "batches pinned")
        return 1
    print(f"DATALOADER ok batches={batches} pinned={pinned}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
