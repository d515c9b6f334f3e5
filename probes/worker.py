"""Probe worker: runs ON A MEASURED HOST, one process per device, for a whole sweep.

This file is shipped over SSH as text and run with the host's own python and torch;
the console never imports it. It depends on nothing but the standard library and
torch, so keep it that way.

Why one long-lived process per device: ``import torch`` costs seconds, and a sweep
needs every device in several pairs; the process imports torch once and then takes
pair jobs, one at a time, as JSON lines on stdin, answering on stdout.

Process hygiene: the console starts it as ``setsid -w python worker.py --pidfile F``,
so the worker leads its own process group and writes that group id to ``F``; the
console kills the group by that id on cancel, timeout and at the end, and removes the
file. The worker also exits by
itself as soon as stdin reaches EOF (the SSH session closed or died), even in the
middle of a transfer.

Protocol (one JSON object per line)::

    worker -> {"event": "hello", "pid", "torch", "nccl", "cuda", "backend", "device", "import_s"}
    console -> {"op": "pair", "id", "rank", "master_addr", "master_port", "peer_addr",
                "ifname"?, "sizes", "reps", "warmup", "max_transfer_s", "min_bytes",
                "timeout_s"}
    worker (rank 0 only) -> {"event": "listening", "id", "port"}
    worker -> {"event": "result", "id", "ok": true, "samples": [[bytes, seconds], ...],
               "interface", "elapsed_s", "transfer_s"}
            | {"event": "result", "id", "ok": false, "error": "..."}
    console -> {"op": "exit"}

Measurement, per direction (rank 0 sends first, then rank 1): ``warmup`` small
ping-pongs and one 1 MiB ping-pong (its rate scales the sizes down so that the
largest transfer takes about ``max_transfer_s``), then for each size ``reps`` timed
round trips of (``size`` bytes there, 1 byte back), timed by the sender's one clock.
A round trip is ``alpha_ij + alpha_ji + size / beta_ij``: its slope over sizes is the
directional bandwidth, and its intercept is the sum of the two one-way latencies.
"""

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time

_PROBE_BYTES = 1 << 20
_SMALL_BYTES = 64 << 10


def _emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _read_stdin(jobs):
    """Feed jobs to the main thread; on EOF (console gone) exit at once."""
    for line in sys.stdin:
        line = line.strip()
        if line:
            jobs.put(line)
    os._exit(0)


def route_interface(peer):
    """The interface the kernel uses towards ``peer`` (``ip route get``)."""
    if peer in ("127.0.0.1", "localhost", "::1"):
        return "lo"
    out = subprocess.run(["ip", "-o", "route", "get", peer], capture_output=True, text=True)
    words = out.stdout.split()
    if out.returncode != 0 or "dev" not in words:
        raise RuntimeError("ip route get %s failed: %s" % (peer, (out.stderr or out.stdout).strip()))
    return words[words.index("dev") + 1]


def plan_sizes(sizes, rate_bytes_s, max_transfer_s, min_bytes):
    """Scale ``sizes`` down (keeping their ratios) so the largest takes ~max_transfer_s."""
    sizes = sorted(int(s) for s in sizes)
    largest = sizes[-1]
    if rate_bytes_s > 0 and largest / rate_bytes_s > max_transfer_s:
        scale = max_transfer_s * rate_bytes_s / largest
        sizes = [max(int(min_bytes), int(s * scale)) for s in sizes]
    out = sorted(set(sizes))
    while len(out) < 3:  # a line needs points; spread above the smallest
        out.append(out[-1] * 2)
    return out


class Pair:
    """One pair job: a two-rank process group, both directions measured."""

    def __init__(self, torch, dist, device, job):
        self.torch, self.dist, self.device, self.job = torch, dist, device, job
        self.rank = int(job["rank"])
        self.ack = torch.zeros(1, dtype=torch.uint8, device=device)

    def _sync(self):
        if self.device != "cpu":
            self.torch.cuda.synchronize()

    def _there_and_back(self, buf, sending):
        peer = 1 - self.rank
        if sending:
            self.dist.send(buf, peer)
            self.dist.recv(self.ack, peer)
        else:
            self.dist.recv(buf, peer)
            self.dist.send(self.ack, peer)
        self._sync()

    def _buffer(self, nbytes):
        return self.torch.empty(int(nbytes), dtype=self.torch.uint8, device=self.device)

    def direction(self, store, sender):
        job, sending = self.job, self.rank == sender
        small = self._buffer(_SMALL_BYTES)
        for _ in range(int(job["warmup"])):
            self._there_and_back(small, sending)
        probe = self._buffer(_PROBE_BYTES)
        started = time.perf_counter()
        self._there_and_back(probe, sending)
        rate = _PROBE_BYTES / max(time.perf_counter() - started, 1e-9)
        key = "plan/%d" % sender
        if sending:
            sizes = plan_sizes(job["sizes"], rate, float(job["max_transfer_s"]), int(job["min_bytes"]))
            store.set(key, json.dumps(sizes))
        else:
            sizes = json.loads(store.get(key).decode())
        samples = []
        for nbytes in sizes:
            buf = self._buffer(nbytes)
            for _ in range(int(job["reps"])):
                started = time.perf_counter()
                self._there_and_back(buf, sending)
                samples.append([nbytes, time.perf_counter() - started])
        return samples if sending else None


def run_pair(torch, dist, backend, device, job):
    import datetime

    started = time.perf_counter()
    rank = int(job["rank"])
    ifname = job.get("ifname") or route_interface(job["peer_addr"])
    os.environ["GLOO_SOCKET_IFNAME"] = ifname
    if backend == "nccl" and ifname != "lo":
        os.environ["NCCL_SOCKET_IFNAME"] = "=" + ifname
    timeout = datetime.timedelta(seconds=float(job["timeout_s"]))
    if rank == 0:
        store = dist.TCPStore(job["master_addr"], 0, 2, True, timeout=timeout, wait_for_workers=False)
        _emit({"event": "listening", "id": job["id"], "port": store.port})
    else:
        store = dist.TCPStore(job["master_addr"], int(job["master_port"]), 2, False, timeout=timeout)
    kwargs = {}
    if backend == "nccl":
        kwargs["device_id"] = torch.device(device)
    dist.init_process_group(backend, store=store, rank=rank, world_size=2, timeout=timeout, **kwargs)
    try:
        pair = Pair(torch, dist, device, job)
        transfer_started = time.perf_counter()
        mine = None
        for sender in (0, 1):
            got = pair.direction(store, sender)
            if got is not None:
                mine = got
        transfer_s = time.perf_counter() - transfer_started
    finally:
        dist.destroy_process_group()
    return {"samples": mine, "interface": ifname,
            "elapsed_s": time.perf_counter() - started, "transfer_s": transfer_s}


def main(argv=None):
    parser = argparse.ArgumentParser(description="geoconsole probe worker (runs on a measured host)")
    parser.add_argument("--name", required=True, help="host name (for messages only)")
    parser.add_argument("--device", required=True, help="'cpu' or a GPU index (PCI bus order)")
    parser.add_argument("--pidfile", required=True)
    args = parser.parse_args(argv)

    with open(args.pidfile, "w") as handle:
        handle.write("%d\n" % os.getpgrp())
    jobs = queue.Queue()
    threading.Thread(target=_read_stdin, args=(jobs,), daemon=True).start()

    started = time.perf_counter()
    import torch  # the expensive part (seconds): paid once per device per sweep
    import torch.distributed as dist

    import_s = time.perf_counter() - started
    cuda = args.device != "cpu" and torch.cuda.is_available()
    if args.device != "cpu" and not cuda:
        _emit({"event": "fatal", "error": "%s: CUDA not available to %s" % (args.name, sys.executable)})
        return 1
    device = "cuda:%d" % int(args.device) if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(int(args.device))
    backend = "nccl" if cuda else "gloo"
    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # a CUDA build without NCCL
            nccl = None
    _emit({"event": "hello", "pid": os.getpid(), "torch": torch.__version__, "nccl": nccl,
           "cuda": cuda, "backend": backend, "device": device, "import_s": import_s,
           "name": args.name})
    while True:
        job = json.loads(jobs.get())
        if job.get("op") == "exit":
            break
        if job.get("op") != "pair":
            _emit({"event": "result", "id": job.get("id"), "ok": False,
                   "error": "unknown op %r" % job.get("op")})
            continue
        try:
            result = run_pair(torch, dist, backend, device, job)
            _emit(dict(result, event="result", id=job["id"], ok=True))
        except Exception as exc:  # reported to the console, which decides
            message = " ".join(("%s: %s" % (type(exc).__name__, exc)).split())[:300]
            _emit({"event": "result", "id": job["id"], "ok": False, "error": message})
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Not sys.exit: interpreter shutdown can hang on the stdin reader thread and
    # torch's atexit hooks; the console removes the pid file.
    os._exit(code)
