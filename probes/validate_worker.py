"""Proxy training step, run on every measured host (one process per device).

Self-contained: the console ships this file over SSH and starts it with the launch
plan's environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``,
``GEOCONSOLE_HOST_ADDR``); only the standard library and torch are imported, and torch
only here, on the measured host. Never imported by the console process.

One step moves what the DT-FM cost model charges for, with real torch.distributed
transfers, rank = replica * D_PP + stage:

1. pipeline: activations of ``c_pp`` bytes forward along every pipeline (stage s waits
   for s - 1, then sends to s + 1), then gradients of the same size back;
2. barrier; data parallel: the sharded parameter-server exchange inside every
   data-parallel group (the ranks of one stage): each member sends a ``c_dp / D_DP``
   shard to every other member and receives one from each (reduce-scatter), then again
   (all-gather), all peers at once;
3. barrier.

Rank 0 times each step from the barrier before it to the barrier after it, and prints
one line ``@@geoconsole-validate {json}`` with every measured step (seconds).
gloo binds its device to ``GEOCONSOLE_HOST_ADDR`` (an address every peer routes to);
nccl uses ``cuda:0`` (the plan sets ``CUDA_VISIBLE_DEVICES``) and ``NCCL_SOCKET_IFNAME``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta

MARKER = "@@geoconsole-validate"


def _args(argv):
    ap = argparse.ArgumentParser(prog="validate_worker")
    ap.add_argument("--d-pp", type=int, required=True)
    ap.add_argument("--d-dp", type=int, required=True)
    ap.add_argument("--c-pp-bytes", type=int, required=True)
    ap.add_argument("--c-dp-bytes", type=int, required=True)
    ap.add_argument("--pp-messages", type=int, default=1)
    ap.add_argument("--dp-messages", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--timeout", type=float, default=300.0)
    return ap.parse_args(argv)


class Comm:
    """Point-to-point exchange and barrier over gloo (explicit device) or nccl."""

    def __init__(self, backend, rank, world, timeout_s):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.backend = torch, dist, backend
        self.rank, self.world = rank, world
        timeout = timedelta(seconds=timeout_s)
        addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        store = dist.TCPStore(addr, port, world, rank == 0, timeout)
        if backend == "gloo":
            opts = dist.ProcessGroupGloo._Options()
            bind = os.environ.get("GEOCONSOLE_HOST_ADDR")
            device = (dist.ProcessGroupGloo.create_device(hostname=bind) if bind
                      else dist.ProcessGroupGloo.create_default_device())
            opts._devices = [device]
            opts._timeout = timeout
            self.pg = dist.ProcessGroupGloo(store, rank, world, opts)
            self.device = "cpu"
        else:
            torch.cuda.set_device(0)
            dist.init_process_group("nccl", store=store, rank=rank, world_size=world, timeout=timeout)
            self.device = "cuda:0"

    def buffer(self, nbytes):
        return self.torch.empty(max(int(nbytes), 1), dtype=self.torch.uint8, device=self.device)

    def exchange(self, sends, recvs, tag):
        """Post every send and receive at once, then wait for all of them."""
        if self.backend == "gloo":
            works = [self.pg.send([t], peer, tag) for peer, t in sends]
            works += [self.pg.recv([t], peer, tag) for peer, t in recvs]
            for w in works:
                w.wait()
            return
        dist = self.dist
        ops = [dist.P2POp(dist.isend, t, peer) for peer, t in sends]
        ops += [dist.P2POp(dist.irecv, t, peer) for peer, t in recvs]
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()
        self.torch.cuda.synchronize()

    def close(self):
        """Final barrier. The caller then leaves with ``os._exit``: tearing down gloo pairs
        and the store in destructors while a peer still finishes the barrier can make that
        peer abort at exit, which would turn a finished measurement into a failed rank."""
        self.barrier()

    def barrier(self):
        if self.backend == "gloo":
            self.pg.barrier().wait()
        else:
            self.dist.barrier()
            self.torch.cuda.synchronize()


def _chunks(buf, n):
    n = max(1, n)
    size = -(-buf.numel() // n)
    return [buf[i:i + size] for i in range(0, buf.numel(), size)]


def step(comm, a, act, grad, shard_out, shard_in):
    """One proxy step; returns (pipeline_s, total_s) as seen by this rank."""
    p, r = a.d_pp, a.d_dp
    rank = comm.rank
    stage, replica = rank % p, rank // p
    comm.barrier()
    t0 = time.perf_counter()
    for chunk_no, fwd in enumerate(_chunks(act, a.pp_messages)):
        tag = 10 + chunk_no
        if stage > 0:
            comm.exchange([], [(rank - 1, fwd)], tag)
        if stage < p - 1:
            comm.exchange([(rank + 1, fwd)], [], tag)
    for chunk_no, bwd in enumerate(_chunks(grad, a.pp_messages)):
        tag = 1000 + chunk_no
        if stage < p - 1:
            comm.exchange([], [(rank + 1, bwd)], tag)
        if stage > 0:
            comm.exchange([(rank - 1, bwd)], [], tag)
    comm.barrier()
    t1 = time.perf_counter()
    peers = [q * p + stage for q in range(r) if q != replica]
    for round_no in range(2):
        for chunk_no in range(max(1, a.dp_messages)):
            outs = [(peer, _chunks(shard_out[k], a.dp_messages)[chunk_no]) for k, peer in enumerate(peers)]
            ins = [(peer, _chunks(shard_in[k], a.dp_messages)[chunk_no]) for k, peer in enumerate(peers)]
            comm.exchange(outs, ins, 100000 + round_no * 1000 + chunk_no)
    comm.barrier()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t0


def main(argv=None) -> int:
    a = _args(sys.argv[1:] if argv is None else argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != a.d_pp * a.d_dp:
        print(f"validate_worker: WORLD_SIZE {world} != D_PP {a.d_pp} x D_DP {a.d_dp}", file=sys.stderr)
        return 2
    comm = Comm(a.backend, rank, world, a.timeout)
    act, grad = comm.buffer(a.c_pp_bytes), comm.buffer(a.c_pp_bytes)
    shard = a.c_dp_bytes // a.d_dp
    shard_out = [comm.buffer(shard) for _ in range(a.d_dp - 1)]
    shard_in = [comm.buffer(shard) for _ in range(a.d_dp - 1)]
    pipeline, total = [], []
    for i in range(a.warmup + a.steps):
        pp_s, step_s = step(comm, a, act, grad, shard_out, shard_in)
        if i >= a.warmup:
            pipeline.append(pp_s)
            total.append(step_s)
    if rank == 0:
        doc = {"step_s": total, "pipeline_s": pipeline,
               "data_p_s": [t - q for t, q in zip(total, pipeline)],
               "world_size": world, "backend": a.backend}
        print(MARKER + " " + json.dumps(doc), flush=True)
    comm.close()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
