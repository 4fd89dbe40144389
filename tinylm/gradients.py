"""Clipping whole gradients by their global norm, as `torch.nn.utils.clip_grad_norm_` does, without the
generality a single device and dtype do not need, and a buffer that holds the gradients contiguously so the
clip is one norm and one multiply."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@torch.no_grad()
def clip_grad_norm_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scales `grads` in place so that their global L2 norm is at most `max_norm`; returns the norm before.

    `torch.nn.utils.clip_grad_norm_`'s arithmetic, op for op (its results are bit for bit the same), for
    gradients on one device in one dtype. Reached through Lightning's precision plugin, torch's version
    spent 0.2 of its 0.7 ms a step (baby model, CPU) on generality this case does not need: grouping
    tensors by device and dtype, moving every per-tensor norm to one device.
    """
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    # Multiplying by a clamped 1.0 when nothing is clipped avoids a host sync on GPU to decide.
    coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    with _one_thread_if_on_cpu(grads[0].device):
        torch._foreach_mul_(grads, coefficient)
    return total


@contextmanager
def _one_thread_if_on_cpu(device: torch.device) -> Iterator[None]:
    """Runs CPU ops inside on one intra-op thread. Scaling the baby model's gradients (0.8M floats) is
    memory-bound and takes one thread 0.1 ms; spread over this project's 2-core VM's two cores it took as
    long when both ran freely, but 0.7 ms whenever the VM slowed down, waiting for the second thread."""
    threads = torch.get_num_threads()
    # PyTorch's native (non-OpenMP) thread pool cannot be resized once used: it would warn every step.
    if device.type != "cpu" or threads == 1 or not torch.backends.openmp.is_available():
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def optimizer_parameters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every parameter of `optimizer`, group after group."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def one_device_and_dtype(tensors: list[torch.Tensor]) -> bool:
    """Whether `tensors` is not empty and all of them live on one device in one dtype."""
    return bool(tensors) and len({(t.device, t.dtype) for t in tensors}) == 1


class ContiguousGradients:
    """The gradients of an optimizer's parameters as views into one contiguous buffer, so that clipping
    them is one norm and one multiply, and zeroing them one fill.

    Why: on CPU, the baby model's 52 gradient tensors made a global-norm clip 52 norms and 52 multiplies,
    each mostly per-op overhead, and `zero_grad` freed 52 tensors for the next backward to allocate again.
    Autograd adds into a gradient that already exists in place (outside `create_graph`), so once `adopt`ed
    the views stay the gradients, step after step, until something sets or replaces a `.grad` (torch's
    `zero_grad` sets them to None); `holds_all` tells, and `adopt` takes them back.

    A zeroed gradient is a tensor of zeros rather than None. For AdamW that is the same step whenever every
    parameter gets a gradient in every step, as in tinylm's models; `adopt` refuses parameters without one.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.params = optimizer_parameters(optimizer)
        first = self.params[0]
        sizes = [p.numel() for p in self.params]
        self.buffer = torch.zeros(sum(sizes), dtype=first.dtype, device=first.device)
        self.views = [view.view_as(p) for view, p in zip(self.buffer.split(sizes), self.params, strict=True)]

    @staticmethod
    def possible(optimizer: torch.optim.Optimizer) -> bool:
        """Whether the optimizer's parameters can share one buffer: at least one, one device, one dtype."""
        return one_device_and_dtype(optimizer_parameters(optimizer))

    def holds_all(self) -> bool:
        """Whether every parameter's gradient is still its view into the buffer."""
        return all(p.grad is view for p, view in zip(self.params, self.views, strict=True))

    @torch.no_grad()
    def adopt(self) -> bool:
        """Copies the current gradients into the buffer and makes its views the gradients. Returns False,
        changing nothing, when some parameter has no gradient."""
        grads = [p.grad for p in self.params]
        if any(grad is None for grad in grads):
            return False
        for p, view, grad in zip(self.params, self.views, grads, strict=True):
            if grad is not view:
                view.copy_(grad)
                p.grad = view
        return True

    @torch.no_grad()
    def clip_norm_(self, max_norm: float) -> torch.Tensor:
        """Scales the gradients so that their global L2 norm is at most `max_norm`; returns the norm before.

        The norm of the whole buffer at once: the same quantity as `clip_grad_norm_`'s norm of per-tensor
        norms, summed in another order (equal to ~1e-5 relative, not bit for bit).
        """
        total = torch.linalg.vector_norm(self.buffer)
        if self.buffer.device.type == "cpu":
            # Nothing to wait for on the host: decide there, and leave the gradients alone when within bounds.
            coefficient = max_norm / (float(total) + 1e-6)
            if coefficient < 1.0:
                with _one_thread_if_on_cpu(self.buffer.device):
                    self.buffer.mul_(coefficient)
        else:
            # A clamped multiply rather than a host sync on the norm to decide.
            self.buffer.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
        return total

    def zero_(self) -> None:
        self.buffer.zero_()
