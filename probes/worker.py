"""Probe worker: runs ON A MEASURED HOST, one process per host, one child per device.

This file is shipped over SSH as text and run with the host's own python and torch;
the console never imports it. It depends on nothing but the standard library and
torch, so keep it that way.

Why one long-lived process: ``import torch`` costs seconds (and many at once on one
host cost far more: fifteen concurrent imports on two cores take ten times as long
as one), and a sweep needs every device in several jobs. The process imports torch
once, then forks one child per device (``--devices cpu,cpu,0``: a CPU slot or a GPU
index each). The parent touches neither CUDA nor a process group before it forks, so
every child starts clean; a child that dies is forked again on request, without a new
import. Children take jobs, one at a time, as JSON lines; the parent relays lines
between its stdin/stdout (the console's SSH channel) and the children, every line
tagged with the child's ``dev`` (its position in ``--devices``).

Process hygiene: the console starts it as ``setsid -w python worker.py --pidfile F``,
so the parent leads its own process group (children stay in it) and writes that group
id to ``F``; the console kills the group by that id on cancel, timeout and at the end,
and removes the file. The parent also kills its children and exits as soon as stdin
reaches EOF (the SSH session closed or died), even in the middle of a transfer, and a
child exits when its parent's pipe closes.

Protocol (one JSON object per line, each with ``"dev"``)::

    worker -> {"event": "hello", "pid", "torch", "nccl", "cuda", "backend", "device", "import_s"}
    console -> {"op": "pair", "id", "rank", "master_addr", "master_port", "peer_addr",
                "ifname"?, "sizes", "reps", "warmup", "max_transfer_s", "min_bytes",
                "timeout_s"}
    console -> {"op": "group", "id", "rank", "world", "senders", "receivers", "nbytes",
                "reps", "master_addr", "master_port", "peer_addr", "ifname"?, "timeout_s"}
    worker (rank 0 only) -> {"event": "listening", "id", "port"}
    worker -> {"event": "result", "id", "ok": true, "samples": [[bytes, seconds], ...],
               "interface", "elapsed_s", "transfer_s"}
            | {"event": "result", "id", "ok": false, "error": "..."}
    worker -> {"event": "exited", "status"}      (the parent: this child died)
    console -> {"op": "restart"}                  (fork this child again)
    console -> {"op": "exit"}                     (without "dev": the whole worker)

Measurement of a pair, per direction (rank 0 sends first, then rank 1): ``warmup``
small ping-pongs and one 1 MiB ping-pong (its rate scales the sizes down so that the
largest transfer takes about ``max_transfer_s``), then for each size ``reps`` timed
round trips of (``size`` bytes there, 1 byte back), timed by the sender's one clock.
A round trip is ``alpha_ij + alpha_ji + size / beta_ij``: its slope over sizes is the
directional bandwidth, and its intercept is the sum of the two one-way latencies.
One process group serves both directions, every size and repetition of a pair.

A *group* job is the concurrent test of a host pair: every sender sends ``nbytes`` to
every receiver at once (then the other way round), ``reps`` times, timed from a barrier
to a barrier; the aggregate rate shows whether the device pairs share a NIC.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

_PROBE_BYTES = 1 << 20
_SMALL_BYTES = 64 << 10


_OUT = {"fd": 1, "dev": None}


def _write(fd, data):
    while data:
        data = data[os.write(fd, data):]


def _emit(obj):
    obj = dict(obj)
    if _OUT["dev"] is not None:
        obj["dev"] = _OUT["dev"]
    _write(_OUT["fd"], (json.dumps(obj) + "\n").encode())


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


def _process_group(torch, dist, backend, device, job, world):
    """Rendezvous (rank 0 hosts the TCPStore and announces its port) and a process group."""
    import datetime

    rank = int(job["rank"])
    ifname = job.get("ifname") or route_interface(job["peer_addr"])
    os.environ["GLOO_SOCKET_IFNAME"] = ifname
    if backend == "nccl" and ifname != "lo":
        os.environ["NCCL_SOCKET_IFNAME"] = "=" + ifname
    timeout = datetime.timedelta(seconds=float(job["timeout_s"]))
    if rank == 0:
        store = dist.TCPStore(job["master_addr"], 0, world, True, timeout=timeout, wait_for_workers=False)
        _emit({"event": "listening", "id": job["id"], "port": store.port})
    else:
        store = dist.TCPStore(job["master_addr"], int(job["master_port"]), world, False, timeout=timeout)
    kwargs = {}
    if backend == "nccl":
        kwargs["device_id"] = torch.device(device)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout, **kwargs)
    return store, ifname


def run_pair(torch, dist, backend, device, job):
    started = time.perf_counter()
    store, ifname = _process_group(torch, dist, backend, device, job, 2)
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


def run_group(torch, dist, backend, device, job):
    """Every sender to every receiver at once, then back; seconds per repetition."""
    started = time.perf_counter()
    world = int(job["world"])
    _store, ifname = _process_group(torch, dist, backend, device, job, world)
    rank = int(job["rank"])
    try:
        sync = (lambda: torch.cuda.synchronize()) if device != "cpu" else (lambda: None)
        buf = {}
        times = {"forward": [], "backward": []}
        transfer_started = time.perf_counter()
        for name, src, dst in (("forward", job["senders"], job["receivers"]),
                               ("backward", job["receivers"], job["senders"])):
            for rep in range(int(job["reps"]) + 1):  # the first one warms the connections
                nbytes = int(job["nbytes"]) if rep else _SMALL_BYTES
                dist.barrier()
                t0 = time.perf_counter()
                ops = []
                if rank in src:
                    for peer in dst:
                        key = ("s", peer, nbytes)
                        if key not in buf:
                            buf[key] = torch.empty(nbytes, dtype=torch.uint8, device=device)
                        ops.append(dist.isend(buf[key], peer))
                if rank in dst:
                    for peer in src:
                        key = ("r", peer, nbytes)
                        if key not in buf:
                            buf[key] = torch.empty(nbytes, dtype=torch.uint8, device=device)
                        ops.append(dist.irecv(buf[key], peer))
                for op in ops:
                    op.wait()
                sync()
                dist.barrier()
                if rep:
                    times[name].append(time.perf_counter() - t0)
        transfer_s = time.perf_counter() - transfer_started
    finally:
        dist.destroy_process_group()
    return {"times": times, "interface": ifname, "elapsed_s": time.perf_counter() - started,
            "transfer_s": transfer_s}


def _child(dev, device_arg, name, jobs_fd, out_fd, import_s, torch, dist):
    """One device's job loop (in a forked child)."""
    _OUT["fd"], _OUT["dev"] = out_fd, dev
    cuda = device_arg != "cpu" and torch.cuda.is_available()
    if device_arg != "cpu" and not cuda:
        _emit({"event": "fatal", "error": "%s: CUDA not available to %s" % (name, sys.executable)})
        return 1
    device = "cuda:%d" % int(device_arg) if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(int(device_arg))
    backend = "nccl" if cuda else "gloo"
    nccl = None
    if cuda:
        try:
            nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # a CUDA build without NCCL
            nccl = None
    _emit({"event": "hello", "pid": os.getpid(), "torch": torch.__version__, "nccl": nccl,
           "cuda": cuda, "backend": backend, "device": device, "import_s": import_s, "name": name})
    for line in os.fdopen(jobs_fd, "r"):
        if not line.strip():
            continue
        job = json.loads(line)
        if job.get("op") == "exit":
            break
        runner = {"pair": run_pair, "group": run_group}.get(job.get("op"))
        if runner is None:
            _emit({"event": "result", "id": job.get("id"), "ok": False,
                   "error": "unknown op %r" % job.get("op")})
            continue
        try:
            result = runner(torch, dist, backend, device, job)
            _emit(dict(result, event="result", id=job["id"], ok=True))
        except Exception as exc:  # reported to the console, which decides
            message = " ".join(("%s: %s" % (type(exc).__name__, exc)).split())[:300]
            _emit({"event": "result", "id": job["id"], "ok": False, "error": message})
    return 0


class Parent:
    """Forks and relays: console lines to children by ``dev``, children's lines back."""

    def __init__(self, name, devices, import_s, torch, dist):
        self.name, self.devices, self.import_s = name, devices, import_s
        self.torch, self.dist = torch, dist
        self.lock = threading.Lock()
        self.children = {}  # dev -> (pid, jobs write fd)

    def fork(self, dev):
        jobs_r, jobs_w = os.pipe()
        out_r, out_w = os.pipe()
        with self.lock:  # no relay thread holds the output lock while we fork
            pid = os.fork()
        if pid == 0:
            keep = {jobs_r, out_w, 2}
            for fd in [0, 1, jobs_w, out_r] + [w for _p, w in self.children.values()]:
                if fd not in keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            code = 1
            try:
                code = _child(dev, self.devices[dev], self.name, jobs_r, out_w, self.import_s,
                              self.torch, self.dist)
            finally:
                os._exit(code)
        os.close(jobs_r)
        os.close(out_w)
        self.children[dev] = (pid, jobs_w)
        threading.Thread(target=self.relay, args=(dev, pid, out_r), daemon=True).start()

    def relay(self, dev, pid, out_r):
        for line in os.fdopen(out_r, "rb"):
            with self.lock:
                _write(1, line if line.endswith(b"\n") else line + b"\n")
        try:
            _pid, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = -1
        with self.lock:
            if self.children.get(dev, (None,))[0] == pid:
                _write(1, (json.dumps({"event": "exited", "dev": dev, "status": status}) + "\n").encode())

    def kill(self, dev):
        pid, jobs_w = self.children.pop(dev, (None, None))
        if pid is None:
            return
        try:
            os.close(jobs_w)
            os.kill(pid, 9)
        except OSError:
            pass

    def serve(self):
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            dev = msg.get("dev")
            if dev is None:
                if msg.get("op") == "exit":
                    break
                continue
            if msg.get("op") == "restart":
                self.kill(dev)
                self.fork(dev)
            elif dev in self.children:
                data = line if line.endswith("\n") else line + "\n"
                try:
                    _write(self.children[dev][1], data.encode())
                except OSError:
                    pass  # the child is gone; its relay reports "exited"
        for dev in list(self.children):
            self.kill(dev)


def main(argv=None):
    parser = argparse.ArgumentParser(description="geoconsole probe worker (runs on a measured host)")
    parser.add_argument("--name", required=True, help="host name (for messages only)")
    parser.add_argument("--devices", required=True,
                        help="comma separated, one child each: 'cpu' or a GPU index (PCI bus order)")
    parser.add_argument("--pidfile", required=True)
    args = parser.parse_args(argv)

    with open(args.pidfile, "w") as handle:
        handle.write("%d\n" % os.getpgrp())
    started = time.perf_counter()
    import torch  # the expensive part (seconds): paid once per host per sweep
    import torch.distributed as dist

    parent = Parent(args.name, args.devices.split(","), time.perf_counter() - started, torch, dist)
    for dev in range(len(parent.devices)):
        parent.fork(dev)
    parent.serve()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # Not sys.exit: interpreter shutdown can hang on the relay threads and torch's
    # atexit hooks; the console removes the pid file.
    os._exit(code)
