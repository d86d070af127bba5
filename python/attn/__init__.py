"""attn: compile attention variants to one binary and run its entries.

    import attn
    m = attn.compile("model.json", target="cpu")   # or attn.load("model.attnb")
    m.entries                                      # entry names, in binary order
    m.signature("full_attention")                  # names, dtypes, dims
    o = m["full_attention"](q, k, v, gate)         # positional, SPEC §4 order
    o, S = m["linear_attention"](*inputs, out=(o_buf, S_buf))
    m.device = "cuda"                              # "cpu" (default) | "cuda"

Inputs are NumPy arrays, PyTorch tensors or other DLPack producers on the
CPU. Contiguous inputs of the entry's dtype are used in place (PyTorch
tensors by their data pointers, never a copy); anything else raises
attn.Error (a ValueError) with the runtime's message, and nothing is
written. Outputs come back as the first input's kind (NumPy in, NumPy out;
torch in, torch out, on its device) unless ``out=`` gives the buffers to
write. With ``m.device = "cuda"``, PyTorch CUDA tensors (on cuda:0) are used
in place and the call is enqueued on torch's current stream (SPEC §8).

A variant of one's own (SPEC §7) is a Python function of the score and
the positions, traced into attn IR by ``attn.score_mod`` / ``attn.mask_mod``
(see attn.variants):

    layer["score_mod"] = attn.score_mod(
        lambda s, b, h, qp, kp, slopes: s - slopes[h] * (qp - kp),
        slopes=attn.Input([num_heads]))
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import Any, Iterable, Sequence

import numpy as np

from ._attn import Error
from . import _attn
from .variants import (Input, ceil, clamp, cos, erf, exp, exp2, floor, log,
                       log2, mask_mod, maximum, minimum, round, rsqrt,
                       score_mod, sigmoid, sign, sin, sqrt, tanh, trunc,
                       where)

__all__ = ["Error", "Module", "Entry", "Signature", "Argument", "compile",
           "load", "merge_states", "score_mod", "mask_mod", "Input", "where",
           "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid",
           "sin", "cos", "erf", "floor", "ceil", "trunc", "round", "minimum",
           "maximum", "clamp", "sign"]

_NUMPY_DTYPES = {"f32": np.float32, "i32": np.int32, "f16": np.float16,
                 # bf16 has no NumPy dtype: its bit patterns as int16.
                 "bf16": np.int16}


def _torch():
    """The torch module if it is imported, else None (attn does not need it)."""
    import sys
    return sys.modules.get("torch")


def _direct_types() -> tuple:
    """The types the native module reads in place: NumPy arrays, and torch
    tensors once torch is imported."""
    torch = _torch()
    return (np.ndarray,) if torch is None else (np.ndarray, torch.Tensor)


def _is_torch(x: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


class Argument:
    """One input or output of an entry: name, dtype ("f32", "i32", "f16",
    "bf16") and shape, with None for a dynamic dim (dims that share a symbol
    agree at run time). `in_place` marks an input the call updates in its
    caller's buffer (SPEC §8: a state pool)."""

    def __init__(self, native: _attn.Argument):
        self.name: str = native.name
        self.dtype: str = native.dtype
        self.shape: tuple = tuple(native.dims)
        # Per dynamic dim: its symbol, and the divisor and cap of a derived
        # size (ceil(Lk / 16) blocks, capped at a top-k's slots).
        self._sizes = tuple(zip(native.symbols, native.ceil_divs,
                                native.at_mosts))
        self.symbols: tuple = tuple(_shown(*size) for size in self._sizes)
        self.in_place: bool = native.in_place

    @property
    def dims(self) -> tuple:
        """The shape (None for a dynamic dim)."""
        return self.shape

    def __repr__(self) -> str:
        dims = ", ".join(str(d) if d is not None else (s or "?")
                         for d, s in zip(self.shape, self.symbols))
        suffix = " (updated in place)" if self.in_place else ""
        return f"{self.name}: {self.dtype}[{dims}]{suffix}"


def _shown(symbol: str, ceil_div: int, at_most: int) -> str:
    """A dim's symbol as attn-run --list shows it: "Lk", "ceil(Lk/16)",
    "min(64, ceil(Lk/16))"; "" for a static dim."""
    if ceil_div > 0:
        symbol = f"ceil({symbol}/{ceil_div})"
    if at_most >= 0:
        symbol = f"min({at_most}, {symbol})"
    return symbol


class Signature:
    """An entry's inputs and outputs, in argument order."""

    def __init__(self, name: str, native):
        self.name = name
        self.inputs = [Argument(a) for a in native[0]]
        self.outputs = [Argument(a) for a in native[1]]

    def __iter__(self):
        """The inputs, then the outputs."""
        return iter(self.inputs + self.outputs)

    def __len__(self) -> int:
        return len(self.inputs) + len(self.outputs)

    def __getitem__(self, key: int | str) -> Argument:
        """An argument by position (inputs, then outputs) or by name."""
        arguments = self.inputs + self.outputs
        if isinstance(key, str):
            for argument in arguments:
                if argument.name == key:
                    return argument
            raise KeyError(f"{self.name} has no argument {key!r}")
        return arguments[key]

    def __repr__(self) -> str:
        ins = ", ".join(map(repr, self.inputs))
        outs = ", ".join(map(repr, self.outputs))
        return f"{self.name}({ins}) -> ({outs})"

    def symbolic_output_shapes(self, shapes: Sequence[Sequence[Any]],
                               dtypes: Sequence[str]) -> list[list[Any]]:
        """The outputs' shapes from the inputs' shapes and dtypes, computed
        with the sizes as given: each may be an int or a symbolic size
        (torch.SymInt under torch.compile's dynamic shapes), which is never
        turned into an int, so a compiled graph stays valid for every size.
        Checks what needs no size: the count, ranks, dtypes and static dims
        (attn.Error naming the input); the runtime checks the rest when the
        entry runs."""
        if len(shapes) != len(self.inputs):
            raise Error(f"{self.name}: expected {len(self.inputs)} inputs, "
                        f"got {len(shapes)}")
        sizes = {}
        for index, (argument, shape, dtype) in enumerate(
                zip(self.inputs, shapes, dtypes)):
            what = f"input '{argument.name}' (#{index}) of entry '{self.name}'"
            if dtype != argument.dtype:
                raise Error(f"{what}: expected dtype {argument.dtype}, got "
                            f"{dtype}")
            if len(shape) != len(argument.shape):
                raise Error(f"{what}: expected rank {len(argument.shape)}, "
                            f"got {len(shape)}")
            for d, (static, size, (symbol, ceil_div, _)) in enumerate(
                    zip(argument.shape, shape, argument._sizes)):
                if static is not None and isinstance(size, int) \
                        and size != static:
                    raise Error(f"{what}: dim {d} must be {static}, got "
                                f"{size}")
                if symbol and not ceil_div:
                    sizes.setdefault(symbol, size)
        output_shapes = []
        for argument in self.outputs:
            shape = []
            for static, (symbol, ceil_div, at_most) in zip(argument.shape,
                                                           argument._sizes):
                if static is not None:
                    shape.append(static)
                elif symbol in sizes:
                    shape.append(_derived(sizes[symbol], ceil_div, at_most))
                else:
                    raise Error(f"{self.name}: output '{argument.name}' has "
                                f"a size {symbol} that no input's dims set")
            output_shapes.append(shape)
        return output_shapes


def _derived(size: Any, ceil_div: int, at_most: int) -> Any:
    """ceil(size / ceil_div), capped at at_most where that is >= 0, in
    arithmetic that keeps a symbolic size symbolic."""
    if ceil_div > 0:
        size = (size + (ceil_div - 1)) // ceil_div
    if at_most >= 0:
        if isinstance(size, int):
            size = min(size, at_most)
        else:
            import torch
            size = torch.sym_min(size, at_most)
    return size


def _as_native(x: Any, what: str):
    """`x` as the native module takes it (a NumPy array or a torch tensor),
    a NumPy view of its memory for other DLPack producers (no copy), or
    attn.Error."""
    if isinstance(x, np.ndarray) or _is_torch(x):
        return x  # the native module reads both in place
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (TypeError, RuntimeError, BufferError) as e:
            raise Error(f"{what}: cannot view it as a CPU array: {e}") from None
    raise Error(f"{what}: expected a NumPy array, a torch tensor or a DLPack "
                f"tensor, got {type(x).__name__}")


class Entry:
    """One entry of a compiled model; call it with its inputs in order."""

    def __init__(self, module: "Module", name: str):
        self._module = module
        self._native = module._native
        self.name = name
        self.signature = module.signature(name)
        self.__doc__ = f"{self.signature!r}"

    def __repr__(self) -> str:
        return f"<attn entry {self.signature!r}>"

    def __call__(self, *inputs: Any, out: Sequence[Any] | Any | None = None):
        direct = _direct_types()
        native_inputs = [_as_native(x, self._label("input", i))
                         if not isinstance(x, direct) else x
                         for i, x in enumerate(inputs)]
        outputs = self.signature.outputs
        if out is not None:
            results = list(out) if isinstance(out, (tuple, list)) else [out]
        else:
            shapes = self._native.output_shapes(self.name, native_inputs)
            results = [self._allocate(arg, shape, inputs[0] if inputs else None)
                       for arg, shape in zip(outputs, shapes)]
        native_outputs = [_as_native(r, self._label("output", i))
                          if not isinstance(r, direct) else r
                          for i, r in enumerate(results)]
        self._native.run(self.name, native_inputs, native_outputs)
        return results[0] if len(results) == 1 else tuple(results)

    def workspace_bytes(self, *inputs: Any) -> int:
        """The bytes of temporaries a call on inputs of these shapes needs
        on the module's device: what `Module.set_workspace` must hold for
        it (SPEC §8)."""
        direct = _direct_types()
        native_inputs = [_as_native(x, self._label("input", i))
                         if not isinstance(x, direct) else x
                         for i, x in enumerate(inputs)]
        return self._native.workspace_bytes(self.name, native_inputs)

    def _label(self, kind: str, i: int) -> str:
        """How errors name argument `i` of `kind` ("input", "output")."""
        args = self.signature.inputs if kind == "input" else self.signature.outputs
        name = f" ({args[i].name})" if i < len(args) else ""
        return f"{self.name}: {kind} {i}{name}"

    @staticmethod
    def _allocate(arg: Argument, shape, like: Any):
        if _is_torch(like):
            torch = _torch()
            dtypes = {"f32": torch.float32, "i32": torch.int32,
                      "f16": torch.float16, "bf16": torch.bfloat16}
            return torch.empty(tuple(shape), dtype=dtypes[arg.dtype],
                               device=like.device)
        return np.empty(tuple(shape), dtype=_NUMPY_DTYPES[arg.dtype])


class Module:
    """A loaded binary: its entries, their signatures, where they run."""

    def __init__(self, native: _attn.Model):
        self._native = native
        self._entries: dict[str, Entry] = {}

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def entries(self) -> list[str]:
        """Entry names, in binary order."""
        return list(self._native.entries)

    @property
    def device(self) -> str:
        """"cpu" (the model's thread pool) or "cuda" (the first GPU)."""
        return self._native.device

    @device.setter
    def device(self, device: str) -> None:
        self._native.device = device

    def signature(self, entry: str) -> Signature:
        return Signature(entry, self._native.signature(entry))

    def __getitem__(self, entry: str) -> Entry:
        if entry not in self._entries:
            self._entries[entry] = Entry(self, entry)
        return self._entries[entry]

    def __contains__(self, entry: str) -> bool:
        return entry in self._native.entries

    def set_workspace(self, buffer: Any) -> None:
        """Gives calls on CUDA tensors a workspace for their temporaries: a
        contiguous torch CUDA tensor of at least the bytes
        `Entry.workspace_bytes` reports for the largest call (None takes it
        back). With one, a call allocates nothing, so it can be captured in
        a CUDA graph; calls that share it must be ordered on the GPU. The
        module keeps the tensor alive while it is set."""
        if buffer is None:
            self._native.set_workspace(0, 0)
        else:
            if not (_is_torch(buffer) and buffer.is_cuda
                    and buffer.is_contiguous()):
                raise Error("set_workspace: expected a contiguous torch CUDA "
                            "tensor or None")
            self._native.set_workspace(buffer.data_ptr(),
                                       buffer.numel() * buffer.element_size())
        self._workspace = buffer

    def check_device(self) -> None:
        """Raises `attn.Error` for the first index input in CUDA memory (a
        page table, offsets, slots, tree parents or a path) that broke its
        contract in a call since the last check, naming the entry, the input
        and the element; the kernels found it on the GPU, and that entry's
        CUDA calls write nothing until it is checked. With errors in several
        entries, each check raises the next. Call it after
        synchronising the streams of those calls
        (``torch.cuda.synchronize()``)."""
        self._native.check_device()

    def register_torch_ops(self, namespace: str):
        """Registers each entry as a PyTorch operator,
        ``torch.ops.<namespace>.<entry>`` (a dot in an entry's name becomes
        an underscore: ``full_attention_tree``), and returns
        ``torch.ops.<namespace>``. Its CPU and CUDA kernels call the entry
        (CUDA tensors run on the current stream); its Meta kernel gives the
        outputs' shapes and dtypes without running anything, for tracing,
        and keeps symbolic sizes symbolic (torch.compile with dynamic
        shapes: one graph for every sequence length). Inputs the entry
        updates in place are mutable in the schema. The registrations live
        as long as this module."""
        import torch
        from torch import library

        lib = library.Library(namespace, "DEF")
        torch_dtypes = {"f32": torch.float32, "i32": torch.int32,
                        "f16": torch.float16, "bf16": torch.bfloat16}
        names = {value: key for key, value in torch_dtypes.items()}
        for index, entry_name in enumerate(self.entries):
            op = entry_name.replace(".", "_")
            signature = self.signature(entry_name)
            params = ", ".join(
                f"Tensor(a{i}!) {a.name}" if a.in_place else f"Tensor {a.name}"
                for i, a in enumerate(signature.inputs))
            results = ", ".join("Tensor" for _ in signature.outputs)
            returns = (results if len(signature.outputs) == 1
                       else f"({results})")
            lib.define(f"{op}({params}) -> {returns}")
            entry = self[entry_name]
            outputs = signature.outputs

            def run(*inputs, entry=entry, outputs=outputs):
                result = entry(*inputs)
                return result if outputs else None  # "-> ()"

            def meta(*inputs, entry_name=entry_name, signature=signature,
                     outputs=outputs):
                shapes = [list(x.shape) for x in inputs]
                dtypes = [names.get(x.dtype, str(x.dtype)) for x in inputs]
                if all(isinstance(size, int) for shape in shapes
                       for size in shape):
                    # Concrete sizes: the runtime checks every dim.
                    shapes = self._native.output_shapes_of(entry_name, shapes,
                                                           dtypes)
                else:
                    # torch.compile's dynamic shapes: asking the runtime
                    # would turn each size into an int, fixing the graph to
                    # it (a recompilation per sequence length).
                    shapes = signature.symbolic_output_shapes(shapes, dtypes)
                made = tuple(torch.empty(shape, dtype=torch_dtypes[a.dtype],
                                         device="meta")
                             for a, shape in zip(outputs, shapes))
                if not made:
                    return None
                return made[0] if len(made) == 1 else made

            for key in ("CPU", "CUDA"):
                lib.impl(op, run, key)
            # Torch 1.13 has no autograd fallthrough for Meta tensors.
            for key in ("Meta", "AutogradMeta"):
                lib.impl(op, meta, key)
        self._torch_libraries = getattr(self, "_torch_libraries", []) + [lib]
        return getattr(torch.ops, namespace)

    def __repr__(self) -> str:
        return f"<attn module {self.name!r}: {', '.join(self.entries)}>"


def _attnc() -> str:
    """The attnc driver: $ATTN_ATTNC, else the build tree's (this package
    lives in build/python/attn, attnc in build/bin)."""
    path = os.environ.get("ATTN_ATTNC")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, os.pardir, os.pardir, "bin", "attnc")


def compile(source: Any, target: str = "cpu", *, threads: int = 0,
            cpu: str | None = None, sm: str | None = None,
            output: str | os.PathLike | None = None) -> Module:
    """Compiles a model and loads it.

    `source` is a path (a model description .json, a Hugging Face
    config.json, attn IR .mlir), a dict (a model description; NumPy
    scalars in it are the numbers they hold), or the text of a description
    or of attn IR. A one-line string that opens neither is a path, and an
    error if no file is there. `target` is "cpu", "cuda" or "all";
    `cpu` and `sm` are attnc's --cpu and --sm; `output` keeps the .attnb
    there for attn.load or attn-run. A compile error raises attn.Error with
    attnc's message.
    """
    with tempfile.TemporaryDirectory(prefix="attn-") as tmp:
        if isinstance(source, dict):
            path = os.path.join(tmp, "model.json")
            with open(path, "w") as f:
                json.dump(source, f, default=_json_scalar)
        elif isinstance(source, (str, os.PathLike)) and os.path.exists(source):
            path = os.fspath(source)
        elif isinstance(source, os.PathLike) or (
                isinstance(source, str) and _names_a_file(source)):
            raise Error(f"compile: {os.fspath(source)}: no such file")
        elif isinstance(source, str):
            text = source.lstrip()
            path = os.path.join(tmp, "model.json" if text.startswith("{")
                                else "model.mlir")
            with open(path, "w") as f:
                f.write(source)
        else:
            raise Error(f"compile: expected a path, a dict or the text of a "
                        f"model, got {type(source).__name__}")
        binary = (os.fspath(output) if output is not None
                  else os.path.join(tmp, "model.attnb"))
        command = [_attnc(), path, "-o", binary, f"--target={target}"]
        if cpu:
            command.append(f"--cpu={cpu}")
        if sm:
            command.append(f"--sm={sm}")
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        except OSError as e:
            raise Error(f"compile: cannot run attnc ({command[0]}): {e}; set "
                        "ATTN_ATTNC to its path") from None
        if done.returncode != 0:
            raise Error(done.stderr.strip() or
                        f"attnc failed with status {done.returncode}")
        return load(binary, threads=threads)


def _json_scalar(value: Any) -> Any:
    """A NumPy or PyTorch scalar in a model dict as the Python number it
    holds (json.dump's fallback); anything else is no JSON value."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return value.item()
    raise Error(f"compile: a {type(value).__name__} in the model dict is "
                "not a JSON value")


def _names_a_file(text: str) -> bool:
    """Whether a string given to compile is meant as a path rather than
    the text of a model: one line that opens neither a JSON object nor
    attn IR, so a mistyped path is reported as one."""
    line = text.strip()
    return bool(line) and "\n" not in line and not line.startswith(
        ("{", "module", "func.func", "//", "#", "!", "\""))


def load(source: Any, *, threads: int = 0) -> Module:
    """Loads a compiled model from a path or from its bytes. `threads` <= 0
    uses every core."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return Module(_attn.Model.from_bytes(bytes(source), threads))
    return Module(_attn.Model.from_file(os.fspath(source), threads))


def merge_states(parts: Iterable[tuple[Any, Any]], sinks: Any = None):
    """The (o, lse) of attention over the union of the key sets of `parts`,
    each an (o, lse) pair of one key set (SPEC §1.1's log-sum-exp
    combination): o[..., Dv] and lse[...] with the same leading dims (e.g.
    [B, H, Lq, Dv] and [B, H, Lq], or ragged [T, H, Dv] and [T, H]). A part
    with lse = -inf contributes nothing; a row whose parts all have
    lse = -inf gives o = 0 and lse = -inf. NumPy or torch, as the inputs.

    `sinks` [H] (attention sinks, as a layer's `"sinks": true` takes them;
    H is lse's dim 1) joins the merged softmax once, as one more part whose
    o is 0 and whose lse is the head's sink: parts computed without sinks
    (sinks of -inf) merge into attention with them.
    """
    parts = list(parts)
    if not parts:
        raise Error("merge_states: no parts")
    os_, lses = zip(*parts)
    for i, (x, y) in enumerate(zip(os_, lses)):
        if tuple(x.shape)[:-1] != tuple(y.shape):
            raise Error(f"merge_states: part {i}: o {tuple(x.shape)} and lse "
                        f"{tuple(y.shape)} differ in their leading dims")
        if tuple(x.shape) != tuple(os_[0].shape):
            raise Error(f"merge_states: part {i}: o {tuple(x.shape)}, but "
                        f"part 0's is {tuple(os_[0].shape)}")
    if sinks is not None:
        parts.append(_sink_part(os_[0], lses[0], sinks))
        os_, lses = zip(*parts)
    if _is_torch(os_[0]):
        torch = _torch()
        lse = torch.stack([x.float() for x in lses])
        o = torch.stack([x.float() for x in os_])
        top = lse.max(dim=0).values
        safe = torch.where(torch.isinf(top) & (top < 0), torch.zeros_like(top),
                           top)
        weights = torch.exp(lse - safe)
        total = weights.sum(dim=0)
        merged = (weights.unsqueeze(-1) * o).sum(dim=0)
        merged = torch.where(total.unsqueeze(-1) > 0,
                             merged / total.clamp_min(1e-38).unsqueeze(-1),
                             torch.zeros_like(merged))
        return merged.to(os_[0].dtype), safe + torch.log(total)
    lse = np.stack([np.asarray(x, dtype=np.float64) for x in lses])
    o = np.stack([np.asarray(x, dtype=np.float64) for x in os_])
    top = lse.max(axis=0)
    safe = np.where(np.isneginf(top), 0.0, top)
    weights = np.exp(lse - safe)
    total = weights.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        merged = np.where(total[..., None] > 0,
                          (weights[..., None] * o).sum(axis=0) /
                          total[..., None], 0.0)
        merged_lse = safe + np.log(total)
    dtype = np.asarray(os_[0]).dtype
    return merged.astype(dtype), merged_lse.astype(np.float32)


def _sink_part(o: Any, lse: Any, sinks: Any) -> tuple[Any, Any]:
    """merge_states' part of the sinks: o = 0 and lse[.., h, ..] =
    sinks[h], shaped as the first part."""
    shape = tuple(lse.shape)
    heads = shape[1] if len(shape) >= 2 else None
    if tuple(sinks.shape) != (heads,):
        raise Error(f"merge_states: sinks {tuple(sinks.shape)} must hold one "
                    f"logit per head of lse's dim 1, {shape}")
    at = [1] * len(shape)
    at[1] = heads
    if _is_torch(o):
        torch = _torch()
        sink_lse = torch.as_tensor(sinks, dtype=torch.float32,
                                   device=lse.device).reshape(at).expand(shape)
        return torch.zeros_like(o), sink_lse
    sink_lse = np.broadcast_to(
        np.asarray(sinks, dtype=np.float32).reshape(at), shape)
    return np.zeros_like(np.asarray(o)), sink_lse
