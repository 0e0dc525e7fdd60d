"""Horovod (torch frontend, Horovod's own gloo ring) as ddlstudy strategies: `horovod`, and
`horovod_fp16` (the same with Horovod's fp16 gradient compression).

It runs under the ordinary torch trainer (ddlstudy.train.trainer): same engines, same data shards,
same records. The trainer's torch.distributed group is used only for its chunk barriers and, here,
to hand rank 0's rendezvous address to the others; every gradient byte goes through Horovod.

Start-up, as `horovodrun --gloo` does it but from the ipyparallel engines: rank 0 starts
Horovod's `RendezvousServer` (an HTTP key-value store) and initialises it with the slot plan
of `get_host_assignments` (one host with N slots on loopback; one host per address when the
engines sit in their own network namespaces); every rank sets `create_slot_env_vars(slot)`,
`HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT`, `HOROVOD_CONTROLLER=gloo`, `HOROVOD_CPU_OPERATIONS=gloo`
and `HOROVOD_GLOO_IFACE` (the engine's `GLOO_SOCKET_IFNAME` under emulation, else the interface
holding its address) and calls `hvd.init()`, all ranks at once.

Training: `hvd.DistributedOptimizer(torch.optim.SGD(...))` with Horovod's defaults (0.28.1):
op=Average, compression none, backward_passes_per_step=1, gradient_predivide_factor=1.0, no
groups; each gradient's all-reduce is queued from its autograd hook during backward, and
Horovod's background thread fuses queued tensors into buffers of up to HOROVOD_FUSION_THRESHOLD
(default 128 MiB) every HOROVOD_CYCLE_TIME (default 1 ms); response cache on, autotune off.
Those environment variables, when set in the engines' environment, are honoured; every
record carries the values in effect on rank 0 (`tuning`: summary columns hvd_* and meta.json's
`settings`), defaults included.

Per step: compute_s = forward + backward (all-reduces already in flight), comm_wait_s = the wait
in `optimizer.synchronize()` (the exposed communication), update_s = the SGD step; comm_s is not
observable (Horovod's thread) and stays NaN. Bytes are the ring's 2(N-1)/N x gradient bytes per
worker (analytic, as for ddp: Horovod's gloo all-reduce is a ring; measure them on the wire with
the namespace counters under emulation). Compute replay hands each replayed gradient to
Horovod's own hook, in reverse order, so fusion and overlap behave as after a real backward.

`horovod_fp16`: everything as above but `compression=hvd.Compression.fp16` (Horovod 0.28.1's
FP16Compressor, horovod/torch/compression.py: each floating-point gradient cast to float16
before its all-reduce, averaged in float16, cast back to its own dtype after). Its bytes are
the ring's 2(N-1)/N x gradient elements x 2 bytes (analytic), half of `horovod`'s for float32
gradients; every record carries `compression` (none / fp16) beside the tuning columns.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, ClassVar

import torch
from torch import nn

from ddlstudy.strategies import StepStats, Strategy

FIX = "run `make setup` (it builds Horovod 0.28.1 with scripts/build_horovod.sh)"


def import_horovod() -> Any:
    """horovod.torch, or ImportError with one line naming the fix."""
    try:
        import horovod.torch as hvd
    except ImportError as err:
        raise ImportError(f"horovod is not installed or not built for this torch ({err}); "
                          f"{FIX}") from None
    return hvd


def _iface_of(ip: str) -> str:
    """The network interface that holds `ip` (Horovod's gloo binds to an interface name)."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == ip for a in addrs):
            return name
    return "lo"


def _host_plan(addrs: list[str]) -> str:
    """Horovod's -H string: one host per distinct address, slots in rank order."""
    hosts: list[tuple[str, int]] = []
    for a in addrs:
        if hosts and hosts[-1][0] == a:
            hosts[-1] = (a, hosts[-1][1] + 1)
        elif any(h == a for h, _ in hosts):
            raise ValueError(f"engines on {a} do not hold consecutive ranks ({addrs}); Horovod "
                             "numbers ranks host by host")
        else:
            hosts.append((a, 1))
    return ",".join(f"{h}:{n}" for h, n in hosts)


def _hostname_is_own_address(ip: str) -> None:
    """Under emulation, make gethostname() return this engine's namespace address.

    Horovod 0.28.1's process-set gloo context (gloo_context.cc, InitializeForProcessSet) never
    copies HOROVOD_GLOO_IFACE into its device, so its device binds to what the host name
    resolves to: 127.0.0.1 here, which is every namespace's own loopback, and the peers' connects
    are refused. A private UTS namespace (this engine process only; threads started later
    inherit it) with the address as host name makes that device bind to the shaped veth too.
    """
    import ctypes
    import socket

    libc = ctypes.CDLL(None, use_errno=True)
    clone_newuts = 0x04000000
    if libc.unshare(clone_newuts) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUTS) failed (needs root); Horovod "
                      "cannot bind its process-set context to the namespace's link")
    socket.sethostname(ip)


# Horovod 0.28.1's defaults (horovod/common/operations.cc, InitializeHorovodOnce's env parsing):
# env var -> (summary column, default, parse).
TUNING: dict[str, tuple[str, Any, Any]] = {
    "HOROVOD_FUSION_THRESHOLD": ("hvd_fusion_threshold_bytes", 128 * 1024 * 1024, int),
    "HOROVOD_CYCLE_TIME": ("hvd_cycle_time_ms", 1.0, float),
    "HOROVOD_CACHE_CAPACITY": ("hvd_cache_capacity", 1024, int),
    "HOROVOD_AUTOTUNE": ("hvd_autotune", 0, int),
}


def tuning(env: dict[str, str] | None = None) -> dict[str, Any]:
    """Horovod's tensor-fusion / cycle / response-cache / autotune settings in effect under
    `env` (default: this process's environment, which hvd.init() read), defaults included;
    `hvd_tuning_set` names the variables that overrode a default ("" when none did)."""
    env = dict(os.environ if env is None else env)
    out: dict[str, Any] = {}
    for var, (column, default, parse) in TUNING.items():
        raw = env.get(var)
        try:
            out[column] = parse(raw) if raw not in (None, "") else default
        except ValueError:
            raise ValueError(f"{var}={raw!r} is not a number: unset it or give one") from None
    out["hvd_tuning_set"] = ",".join(v for v in TUNING if env.get(v) not in (None, ""))
    return out


def wire_bytes(p: torch.Tensor, compression: str) -> int:
    """Bytes of p's gradient as Horovod all-reduces it: fp16 casts a floating-point gradient to
    2 bytes per element (FP16Compressor.compress), anything else goes as it is."""
    if compression == "fp16" and p.dtype.is_floating_point:
        return p.numel() * 2
    if compression in ("none", "fp16"):
        return p.numel() * p.element_size()
    raise ValueError(f"unknown Horovod compression {compression!r}: use none or fp16")


def start_rendezvous(ip: str) -> tuple[Any, int]:
    """Horovod's RendezvousServer listening on `ip` only (the cluster's address: 127.0.0.1 for a
    local cluster), on a port the OS picks. Its own `start()` binds ('', port): every interface,
    an unauthenticated HTTP server. Returns (server, port); `server.stop()` works as usual."""
    from horovod.runner.http.http_server import (
        RendezvousHandler,
        RendezvousHTTPServer,
        RendezvousServer,
    )
    from horovod.runner.util.threads import in_thread

    server = RendezvousServer()
    httpd = RendezvousHTTPServer((ip, 0), RendezvousHandler, 0)
    server._httpd = httpd  # what RendezvousServer.start sets, with the address bound
    server._listen_thread = in_thread(target=httpd.serve_forever)
    return server, int(httpd.server_address[1])


def rendezvous(rank: int, world: int, timeout_s: float) -> Any:
    """Start Horovod on this rank through rank 0's RendezvousServer; returns (hvd, server)."""
    import torch.distributed as dist
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.gloo_run import create_slot_env_vars

    from ddlstudy.frameworks import host_ip

    hvd = import_horovod()
    ip = host_ip()
    if os.environ.get("DDLSTUDY_NETNS") and world > 1:
        _hostname_is_own_address(ip)
    addrs: list[Any] = [None] * world
    dist.all_gather_object(addrs, ip)
    plan = get_host_assignments(parse_hosts(_host_plan(addrs)), world)
    server, port = None, [0]
    if rank == 0:
        server, port[0] = start_rendezvous(ip)
        server.init(plan)
    dist.broadcast_object_list(port, src=0)
    slot = next(s for s in plan if s.rank == rank)
    os.environ.update(create_slot_env_vars(slot))
    os.environ.update({
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": addrs[0], "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port[0]),
        "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": os.environ.get("GLOO_SOCKET_IFNAME") or _iface_of(ip),
        "HOROVOD_GLOO_TIMEOUT_SECONDS": str(int(timeout_s)),
    })
    hvd.init()
    if hvd.rank() != rank or hvd.size() != world:
        raise RuntimeError(f"Horovod rank {hvd.rank()}/{hvd.size()} != trainer rank "
                           f"{rank}/{world}")
    return hvd, server


class Horovod(Strategy):
    """hvd.DistributedOptimizer over Horovod's gloo ring (see the module docstring)."""

    name = "horovod"
    compression: ClassVar[str] = "none"  # a name in hvd.Compression: none or fp16

    def __init__(self, model: nn.Module, **kw: Any) -> None:
        super().__init__(model, **kw)
        import torch.distributed as dist

        if self.layout.servers:
            raise ValueError("horovod has no parameter servers")
        if not dist.is_initialized():
            raise RuntimeError("horovod under the trainer needs its torch.distributed group")
        self.world = self.layout.workers
        self.hvd, self._server = rendezvous(self.rank, self.world, self.timeout_s)
        hvd = self.hvd
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.opt = hvd.DistributedOptimizer(self._optimizer(self.params), named_parameters=named,
                                            compression=getattr(hvd.Compression,
                                                                self.compression))
        # Horovod's own broadcast (every rank seeded the same init; this keeps it so anyway).
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self._hooks = {p: self.opt._make_hook(p) for p in self.params} if self.world > 1 else {}
        self.grad_bytes = sum(wire_bytes(p, self.compression) for p in self.params)

    def settings(self) -> dict[str, Any]:
        return {**tuning(), "compression": self.compression}

    def _grad_ready(self, p: torch.Tensor) -> None:
        """Replay: a replayed gradient is handed to Horovod's hook, as autograd would."""
        hook = self._hooks.get(p)
        if hook is not None:
            hook()

    def step(self, x: torch.Tensor, y: torch.Tensor) -> StepStats:
        t0 = time.perf_counter()
        loss = self._forward_backward(self.model, x, y)
        t1 = time.perf_counter()
        self.opt.synchronize()
        t2 = time.perf_counter()
        with self.opt.skip_synchronize():
            self.opt.step()
        t3 = time.perf_counter()
        n = self.world
        wire = 2 * (n - 1) * self.grad_bytes // n if n > 1 else 0
        return StepStats(loss=loss, compute_s=t1 - t0, comm_s=math.nan, comm_wait_s=t2 - t1,
                         update_s=t3 - t2, step_s=t3 - t0, bytes_sent=wire, bytes_recv=wire,
                         images=len(x))

    def close(self) -> None:
        """Shut Horovod down and stop rank 0's rendezvous server (engines may run again)."""
        try:
            self.hvd.shutdown()
        finally:
            if self._server is not None:
                self._server.stop()
                self._server = None


class HorovodFp16(Horovod):
    """`horovod` with hvd.Compression.fp16: gradients cross the ring as float16."""

    name, compression = "horovod_fp16", "fp16"
