"""threads_torch.py - PyTorch with DataLoader workers and several Python
threads, each training its own small model on a CUDA stream of its own
(issue 43, item 3: "a PyTorch run with DataLoader workers and a second
CUDA stream per thread").  Written for a later GPU session: unrun so far.

The main thread pulls batches of varying size from a DataLoader with
--workers worker processes and hands them to --threads trainer threads
through a queue; each trainer copies its batch to the GPU on its own
stream and runs forward, backward and an optimizer step there, so that
every thread allocates and frees from its own stream.  A sampler thread
reads the device's used memory through NVML (pynvml) every 5 ms.

Prints one line, then "CHECK threads_torch OK":
    RESULT threads_torch steps=N threads=T workers=W step_ms=X
           nvml_peak_mib=Y torch_peak_reserved_mib=Z
step_ms: wall time per step over all threads (after --warmup steps);
nvml_peak_mib: the most device memory NVML saw used (-1 without pynvml).
Run it under PyTorch's allocator and under fragpool (LD_PRELOAD) to
compare: tests/gpu/threads_check.sh does, rounds interleaved.
"""
import argparse
import queue
import sys
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Shapes(Dataset):
    """Batches whose size changes with the index (variable shapes)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rows = 64 * (1 + (i * 7919) % 16)  # 64 .. 1024 rows
        x = torch.randn(rows, 512)
        y = torch.randint(0, 10, (rows,))
        return x, y


def model():
    return torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                               torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
                               torch.nn.Linear(2048, 10))


class Sampler(threading.Thread):
    """The peak device memory in use per NVML, sampled every 5 ms."""

    def __init__(self, device):
        super().__init__(daemon=True)
        self.peak, self.stop, self.handle = -1, threading.Event(), None
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(device)
        except Exception:  # no pynvml: the peak stays -1
            self.nvml = None

    def run(self):
        while self.handle is not None and not self.stop.is_set():
            used = self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used
            self.peak = max(self.peak, used)
            time.sleep(0.005)


def trainer(q, errors, done_steps, lock):
    try:
        dev = torch.device("cuda")
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            m = model().to(dev)
            opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        while True:
            item = q.get()
            if item is None:
                break
            x, y = item
            with torch.cuda.stream(s):
                xg = x.to(dev, non_blocking=True)
                yg = y.to(dev, non_blocking=True)
                loss = torch.nn.functional.cross_entropy(m(xg), yg)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                del xg, yg, loss
            s.synchronize()
            with lock:
                done_steps[0] += 1
    except Exception as e:  # reported by the main thread
        errors.append(repr(e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP threads_torch: no CUDA device")
        return 77
    torch.cuda.init()
    sampler = Sampler(torch.cuda.current_device())
    sampler.start()
    dl = DataLoader(Shapes(a.steps + a.warmup), batch_size=None, num_workers=a.workers,
                    pin_memory=True, persistent_workers=False)
    q, errors, done, lock = queue.Queue(maxsize=2 * a.threads), [], [0], threading.Lock()
    ts = [threading.Thread(target=trainer, args=(q, errors, done, lock)) for _ in range(a.threads)]
    for t in ts:
        t.start()
    t0 = None
    for i, batch in enumerate(dl):
        if i == a.warmup:
            while done[0] < a.warmup and not errors:  # the warm-up steps finish first
                time.sleep(0.001)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        q.put(batch)
    for _ in ts:
        q.put(None)
    for t in ts:
        t.join()
    torch.cuda.synchronize()
    secs = time.perf_counter() - (t0 or time.perf_counter())
    sampler.stop.set()
    sampler.join()
    if errors:
        print(f"FAIL threads_torch: {errors[0]}")
        return 1
    mib = 1 << 20
    print(f"RESULT threads_torch steps={a.steps} threads={a.threads} workers={a.workers} "
          f"step_ms={secs * 1e3 / a.steps:.3f} "
          f"nvml_peak_mib={sampler.peak // mib if sampler.peak >= 0 else -1} "
          f"torch_peak_reserved_mib={torch.cuda.max_memory_reserved() // mib}")
    print("CHECK threads_torch OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
