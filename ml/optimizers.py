"""torch.optim's SGD, Adam and AdamW, without loading ``torch._dynamo``.

torch.optim readies every optimizer for ``torch.compile``: ``step`` runs inside a wrapper
that breaks the compiled graph around it, and ``zero_grad`` and ``add_param_group`` (which
``__init__`` calls) inside one that keeps the compiler out. Each wrapper imports
``torch._dynamo`` at a process's first call, and sympy, triton's bindings and
``torch.distributed`` come with it: 1.4-2 CPU seconds that every site process paid at its
first optimizer. Nothing here is compiled, and outside a compilation the wrappers do nothing
else: ``step`` sets grad mode to the optimizer's ``differentiable`` (off unless asked), and
the graph breaks are no-ops. The classes below call the functions inside the wrappers, so
their steps are torch's, bit for bit (``tests/test_exact_speedups.py``). torch is pinned
exactly; a torch whose wrappers do more fails that test.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch.optim import Optimizer

_ZERO_GRAD = inspect.unwrap(Optimizer.zero_grad)
_ADD_PARAM_GROUP = inspect.unwrap(Optimizer.add_param_group)


class _WithoutDynamo(Optimizer):
    """An optimizer whose ``step``, ``zero_grad`` and ``add_param_group`` are torch's
    functions without their compiler wrappers; ``_torch_step`` is the torch class's own."""

    _torch_step: ClassVar[Callable[..., Any]]

    def step(self, closure: Callable[[], float] | None = None) -> Any:
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return type(self)._torch_step(self, closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _ZERO_GRAD(self, set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _ADD_PARAM_GROUP(self, param_group)


class SGD(_WithoutDynamo, torch.optim.SGD):
    """:class:`torch.optim.SGD`, stepping without ``torch._dynamo``."""

    _torch_step = staticmethod(inspect.unwrap(torch.optim.SGD.step))


class Adam(_WithoutDynamo, torch.optim.Adam):
    """:class:`torch.optim.Adam`, stepping without ``torch._dynamo``."""

    _torch_step = staticmethod(inspect.unwrap(torch.optim.Adam.step))


class AdamW(_WithoutDynamo, torch.optim.AdamW):
    """:class:`torch.optim.AdamW`, stepping without ``torch._dynamo``."""

    _torch_step = staticmethod(inspect.unwrap(torch.optim.AdamW.step))
