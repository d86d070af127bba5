"""score_mod and mask_mod written as Python functions (SPEC §7).

As with FlexAttention, a variant is one function of the score and the
positions. attn calls it once on symbolic values; the operations it
performs are recorded and written out as the attn IR of a
``{"func": ...}`` variant, which a model description takes in place of a
named one::

    H = 8
    def alibi(s, b, h, qp, kp, slopes):
        return s - slopes[h] * (qp - kp)

    layer = {"name": "attn", "type": "attention", "num_heads": H,
             "num_kv_heads": 2, "head_dim": 64,
             "score_mod": attn.score_mod(alibi, slopes=attn.Input([H]))}
    m = attn.compile({"model": "m", "layers": [layer]})
    o = m["attn"](q, k, v, slopes)          # the extra input comes last

Inside the function, ``s`` is an f32 score and ``b, h, qp, kp`` are
integer positions (SPEC §7). Arithmetic (``+ - * / // % **``, unary ``-``,
``abs``), comparisons, ``& | ^ ~`` on booleans, the functions of this
module (``where``, ``exp``, ``exp2``, ``log``, ``log2``, ``sqrt``,
``rsqrt``, ``tanh``, ``sigmoid``, ``sin``, ``cos``, ``erf``, ``floor``,
``ceil``, ``trunc``, ``round``, ``sign``, ``minimum``, ``maximum``,
``clamp``), ``.long()`` (or ``.int()``), ``.float()``, ``.bool()`` and
``.to(dtype)``, and indexing of the declared inputs by integer values work
as in PyTorch. PyTorch's own functions of these names (``torch.where``,
``torch.tanh``, ``torch.clamp``, ``torch.max(a, b)``, ``torch.div(a, b,
rounding_mode=...)``, ``torch.zeros_like``, ``torch.logical_and``, ...)
and the tensor methods of the same names (``x.abs()``, ``x.clamp(min=0)``,
``x.exp()``, ``x.where(c, y)``, ...) work on traced values too, so a
FlexAttention or attention-gym ``score_mod`` or ``mask_mod`` traces as it
is written: integers meeting floats become floats,
``/`` divides as floats, ``//`` and ``%`` round toward minus infinity,
``.long()`` rounds toward zero. Where PyTorch would raise or leave a value
undefined, the compiled variant defines it (SPEC §7's regions, as
docs/new-variant.md says): an integer ``//`` by 0 gives 0 and ``%`` by 0
the dividend, ``.long()`` saturates, NaN giving 0, and ``sign`` of NaN
is 0. Python control flow on traced values cannot be recorded:
``if``, ``and``, ``or`` and ``not`` raise ``TypeError`` (use ``where``,
``&``, ``|``, ``~``).
"""
from __future__ import annotations

import functools
import inspect
import numbers
import struct
from typing import Any, Callable, Sequence

import numpy as np

_F32, _INDEX, _BOOL = "f32", "index", "i1"
_ELEMENTS = {"f32": "f32", "i32": "i32", "f16": "f16", "bf16": "bf16"}


class Input:
    """An extra input a variant reads: a tensor of `shape` (ints, or None
    for a size known only at run time) and `dtype` ("f32", "i32", "f16"
    or "bf16"). It becomes an input of every entry that holds the
    variant, after the entry's SPEC §4 inputs, named after its keyword."""

    def __init__(self, shape: Sequence[int | None], dtype: str = "f32"):
        if dtype not in _ELEMENTS:
            raise ValueError(f"attn.Input: dtype {dtype!r}: expected one of "
                             f"{', '.join(_ELEMENTS)}")
        for d in shape:
            if d is not None and (not isinstance(d, int) or d < 0):
                raise ValueError(f"attn.Input: shape {tuple(shape)!r}: "
                                 "expected sizes >= 0 or None")
        self.shape = tuple(shape)
        self.dtype = dtype

    def mlir_type(self) -> str:
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
        return f"tensor<{dims}{_ELEMENTS[self.dtype]}>"


class _Trace:
    """The attn IR lines of one traced function."""

    def __init__(self):
        self.lines: list[str] = []
        self.count = 0

    def emit(self, op: str, type_: str) -> "Value":
        name = f"%v{self.count}"
        self.count += 1
        self.lines.append(f"  {name} = {op}")
        return Value(self, name, type_)

    def constant(self, x: Any, type_: str) -> "Value":
        if type_ == _F32:
            bits = struct.unpack("<I", struct.pack("<f", float(x)))[0]
            return self.emit(f"arith.constant 0x{bits:08X} : f32", _F32)
        if type_ == _BOOL:
            return self.emit(f"arith.constant {'true' if x else 'false'}",
                             _BOOL)
        return self.emit(f"arith.constant {int(x)} : index", _INDEX)


def _convert(v: "Value", type_: str) -> "Value":
    """`v` as `type_`: booleans become 0 / 1, integers floats."""
    if v.type == type_:
        return v
    t = v.trace
    if v.type == _BOOL and type_ == _F32:
        return t.emit(f"arith.uitofp {v.name} : i1 to f32", _F32)
    if v.type == _BOOL and type_ == _INDEX:
        wide = t.emit(f"arith.extui {v.name} : i1 to i64", "i64")
        return t.emit(f"arith.index_cast {wide.name} : i64 to index", _INDEX)
    if v.type == _INDEX and type_ == _F32:
        wide = t.emit(f"arith.index_cast {v.name} : index to i64", "i64")
        return t.emit(f"arith.sitofp {wide.name} : i64 to f32", _F32)
    raise TypeError(f"attn variant: {_a(v._kind())} cannot be used as "
                    f"{_a(_KIND[type_])}")


_KIND = {_F32: "float", _INDEX: "integer", _BOOL: "boolean"}


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _lift(trace: _Trace, x: Any, beside: str | None = None) -> "Value":
    """`x` as a traced value; a Python int beside a float is a float
    constant."""
    if isinstance(x, Value):
        if x.trace is not trace:
            raise TypeError("attn variant: a value of another traced function")
        return x
    if isinstance(x, (bool, np.bool_)):
        return trace.constant(x, _BOOL)
    if isinstance(x, numbers.Integral):  # int, NumPy integers
        return trace.constant(x, _F32 if beside == _F32 else _INDEX)
    if isinstance(x, numbers.Real):  # float, NumPy floats
        return trace.constant(x, _F32)
    raise TypeError(f"attn variant: cannot compute with {type(x).__name__} "
                    f"{x!r}; expected traced values, ints, floats or bools")


def _common(a: Any, b: Any, numeric: bool = True):
    """`a` and `b` as values of one type: float if either is, else
    integer (booleans count as integers in arithmetic)."""
    trace = a.trace if isinstance(a, Value) else b.trace
    if isinstance(a, Value):
        b = _lift(trace, b, beside=a.type)
    a = _lift(trace, a, beside=b.type if isinstance(b, Value) else None)
    b = _lift(trace, b, beside=a.type)
    if a.type == b.type and not (numeric and a.type == _BOOL):
        return a, b, a.type
    type_ = _F32 if _F32 in (a.type, b.type) else _INDEX
    return _convert(a, type_), _convert(b, type_), type_


_ARITH = {"add": ("arith.addf", "arith.addi"),
          "sub": ("arith.subf", "arith.subi"),
          "mul": ("arith.mulf", "arith.muli")}
_COMPARE = {"lt": ("olt", "slt"), "le": ("ole", "sle"), "gt": ("ogt", "sgt"),
            "ge": ("oge", "sge"), "eq": ("oeq", "eq"), "ne": ("une", "ne")}


class Value:
    """A value of a traced variant: an f32, an integer position (index)
    or a boolean (i1)."""

    __array_priority__ = 1000  # NumPy scalars defer to these operators

    def __init__(self, trace: _Trace, name: str, type_: str):
        self.trace, self.name, self.type = trace, name, type_

    def _kind(self) -> str:
        return _KIND.get(self.type, self.type)

    def _binary(self, other: Any, op: str, swap: bool = False) -> "Value":
        a, b, type_ = _common(other, self) if swap else _common(self, other)
        float_op, int_op = _ARITH[op]
        return self.trace.emit(
            f"{float_op if type_ == _F32 else int_op} {a.name}, {b.name} : "
            f"{type_}", type_)

    def __add__(self, o): return self._binary(o, "add")
    def __radd__(self, o): return self._binary(o, "add", swap=True)
    def __sub__(self, o): return self._binary(o, "sub")
    def __rsub__(self, o): return self._binary(o, "sub", swap=True)
    def __mul__(self, o): return self._binary(o, "mul")
    def __rmul__(self, o): return self._binary(o, "mul", swap=True)

    def _truediv(self, a: Any, b: Any) -> "Value":
        a, b, _ = _common(a, b)
        a, b = _convert(a, _F32), _convert(b, _F32)
        return self.trace.emit(f"arith.divf {a.name}, {b.name} : f32", _F32)

    def __truediv__(self, o): return self._truediv(self, o)
    def __rtruediv__(self, o): return self._truediv(o, self)

    def _pow(self, a: Any, b: Any) -> "Value":
        # Floats: math.powf; integers: math.ipowi on 32 bits (a negative
        # exponent gives the integer 1 / a^-b, docs/new-variant.md).
        a, b, type_ = _common(a, b)
        t = self.trace
        if type_ == _F32:
            return t.emit(f"math.powf {a.name}, {b.name} : f32", _F32)
        a32, b32 = (t.emit(f"arith.index_cast {v.name} : index to i32", "i32")
                    for v in (a, b))
        p = t.emit(f"math.ipowi {a32.name}, {b32.name} : i32", "i32")
        return t.emit(f"arith.index_cast {p.name} : i32 to index", _INDEX)

    def __pow__(self, o): return self._pow(self, o)
    def __rpow__(self, o): return self._pow(o, self)

    def _floordiv(self, a: Any, b: Any) -> "Value":
        a, b, type_ = _common(a, b)
        if type_ == _F32:
            q = self.trace.emit(f"arith.divf {a.name}, {b.name} : f32", _F32)
            return self.trace.emit(f"math.floor {q.name} : f32", _F32)
        return self.trace.emit(
            f"arith.floordivsi {a.name}, {b.name} : index", _INDEX)

    def __floordiv__(self, o): return self._floordiv(self, o)
    def __rfloordiv__(self, o): return self._floordiv(o, self)

    def _mod(self, a: Any, b: Any) -> "Value":
        # Python's and PyTorch's %: the remainder has the divisor's sign.
        return a - self._floordiv(a, b) * b

    def __mod__(self, o): return self._mod(self, o)
    def __rmod__(self, o): return self._mod(o, self)

    def __neg__(self):
        if self.type == _F32:
            return self.trace.emit(f"arith.negf {self.name} : f32", _F32)
        return 0 - self

    def __pos__(self):
        return self

    def long(self) -> "Value":
        """An integer, as torch's ``.long()``: a float rounds toward zero
        (saturating; NaN gives 0), a boolean is 0 or 1."""
        if self.type == _F32:
            # i32: integer values are 32-bit inside regions (SPEC §7).
            i = self.trace.emit(f"arith.fptosi {self.name} : f32 to i32", "i32")
            return self.trace.emit(f"arith.index_cast {i.name} : i32 to index",
                                   _INDEX)
        return _convert(self, _INDEX)

    int = long

    def float(self) -> "Value":
        """A float, as torch's ``.float()``."""
        return _convert(self, _F32)

    def to(self, dtype) -> "Value":
        """``.to(torch.float32)``, ``.to(torch.long)``, ``.to(torch.bool)``:
        any floating dtype gives a float (computed in f32), any integer one
        an integer, bool whether the value is nonzero."""
        if getattr(dtype, "is_floating_point", False):
            return self.float()
        if str(dtype) == "torch.bool":
            return self != 0 if self.type != _BOOL else self
        if str(dtype).startswith(("torch.int", "torch.uint", "torch.long")):
            return self.long()
        raise TypeError(f"attn variant: .to({dtype!r}): expected a torch "
                        "floating, integer or bool dtype")

    def _constant_of(self, value, dtype) -> "Value":
        """`value` as a constant of torch `dtype`, or of this value's kind."""
        if dtype is None:
            return _full_like(self, value)
        if str(dtype) == "torch.bool":
            return self.trace.constant(bool(value), _BOOL)
        if getattr(dtype, "is_floating_point", False):
            return self.trace.constant(value, _F32)
        return self.trace.constant(value, _INDEX)

    def new_ones(self, size=(), dtype=None, **_) -> "Value":
        """torch's ``new_ones`` on a 0-dim tensor, as FlexAttention's
        ``and_masks`` starts its result: a constant 1 (True)."""
        return self._constant_of(1, dtype)

    def new_zeros(self, size=(), dtype=None, **_) -> "Value":
        """torch's ``new_zeros`` (``or_masks`` starts from it): a constant 0
        (False)."""
        return self._constant_of(0, dtype)

    def bool(self) -> "Value":
        """Whether the value is nonzero, as torch's ``.bool()``."""
        return self != 0 if self.type != _BOOL else self

    def __getattr__(self, name: str):
        # torch.Tensor's methods of the functions _TORCH_FUNCTIONS holds:
        # x.abs(), x.clamp(min=0), x.where(c, y), ... as PyTorch writes them.
        if name.startswith("__"):
            raise AttributeError(name)
        method = _TENSOR_METHODS.get(name)
        if method is not None:
            return functools.partial(method, self)
        raise AttributeError(
            f"attn variant: a traced value has no '{name}'; it has "
            ".long(), .int(), .float(), .bool(), .to(dtype), .new_ones(), "
            ".new_zeros(), the operators and the methods ."
            f"{'(), .'.join(sorted(_TENSOR_METHODS))}()")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # torch.where, torch.tanh, ... called on traced values: a
        # FlexAttention score_mod or mask_mod traces as it is written.
        name = getattr(func, "__name__", str(func))
        if name.startswith("_"):
            # A tensor's own operator (a captured tensor indexed by a
            # position): _trace says how to read tensors instead.
            raise TypeError(f"torch.Tensor.{name} on a traced value")
        implementation = _TORCH_FUNCTIONS.get(name)
        if implementation is None:
            raise TypeError(
                f"attn variant: torch.{name} is not supported in a traced "
                f"function; supported: torch."
                f"{', torch.'.join(sorted(_TORCH_FUNCTIONS))}")
        return implementation(*args, **(kwargs or {}))

    def __abs__(self):
        if self.type == _F32:
            return self.trace.emit(f"math.absf {self.name} : f32", _F32)
        return where(self < 0, -self, self)

    def _compare(self, other: Any, op: str) -> "Value":
        a, b, type_ = _common(self, other, numeric=False)
        float_pred, int_pred = _COMPARE[op]
        if type_ == _F32:
            return self.trace.emit(
                f"arith.cmpf {float_pred}, {a.name}, {b.name} : f32", _BOOL)
        return self.trace.emit(
            f"arith.cmpi {int_pred}, {a.name}, {b.name} : {type_}", _BOOL)

    def __lt__(self, o): return self._compare(o, "lt")
    def __le__(self, o): return self._compare(o, "le")
    def __gt__(self, o): return self._compare(o, "gt")
    def __ge__(self, o): return self._compare(o, "ge")
    def __eq__(self, o): return self._compare(o, "eq")  # type: ignore[override]
    def __ne__(self, o): return self._compare(o, "ne")  # type: ignore[override]
    __hash__ = None  # type: ignore[assignment]

    def _logic(self, other: Any, op: str) -> "Value":
        a, b = _lift(self.trace, self), _lift(self.trace, other)
        if a.type != _BOOL or b.type != _BOOL:
            symbol = {"andi": "&", "ori": "|", "xori": "^ or ~"}[op]
            raise TypeError(f"attn variant: {symbol} takes booleans "
                            f"(comparisons), got {_a(a._kind())} and "
                            f"{_a(b._kind())}")
        return self.trace.emit(f"arith.{op} {a.name}, {b.name} : i1", _BOOL)

    def __and__(self, o): return self._logic(o, "andi")
    def __rand__(self, o): return self._logic(o, "andi")
    def __or__(self, o): return self._logic(o, "ori")
    def __ror__(self, o): return self._logic(o, "ori")
    def __xor__(self, o): return self._logic(o, "xori")
    def __rxor__(self, o): return self._logic(o, "xori")

    def __invert__(self):
        return self._logic(True, "xori")

    def _no_python_value(self, *_):
        raise TypeError(
            "attn variant: a traced value has no Python value: use "
            "attn.where(c, a, b) for if/else, & | ~ for and/or/not, "
            "attn.exp / attn.log / ... for math functions, and read tensors "
            "through arguments declared with attn.Input, not captured arrays")

    __bool__ = __float__ = __int__ = __index__ = _no_python_value

    def __repr__(self) -> str:
        return f"<attn traced {self._kind()} {self.name}>"


class TensorInput:
    """A declared input inside a traced function: indexing it by integer
    values reads one element (tensor.extract)."""

    def __init__(self, trace: _Trace, ssa: str, name: str, spec: Input):
        self.trace, self.ssa, self.spec, self.label = trace, ssa, spec, name

    def __getitem__(self, indices) -> Value:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.spec.shape):
            raise IndexError(
                f"attn variant: input '{self.label}' has "
                f"{len(self.spec.shape)} dims, indexed with {len(indices)}")
        at = [_convert(_lift(self.trace, i), _INDEX) for i in indices]
        type_ = self.spec.mlir_type()
        element = _ELEMENTS[self.spec.dtype]
        value = self.trace.emit(
            f"tensor.extract {self.ssa}[{', '.join(v.name for v in at)}] : "
            f"{type_}", element)
        if element == "i32":
            return self.trace.emit(
                f"arith.index_cast {value.name} : i32 to index", _INDEX)
        if element != "f32":
            return self.trace.emit(
                f"arith.extf {value.name} : {element} to f32", _F32)
        value.type = _F32
        return value


def _trace_of(values) -> _Trace:
    for v in values:
        if isinstance(v, Value):
            return v.trace
    raise TypeError("attn variant: these functions take traced values")


def _unary(op: str, x: Any) -> Value:
    trace = _trace_of([x])
    v = _convert(_lift(trace, x), _F32)
    return trace.emit(f"{op} {v.name} : f32", _F32)


def exp(x): return _unary("math.exp", x)
def exp2(x): return _unary("math.exp2", x)
def log(x): return _unary("math.log", x)
def sqrt(x): return _unary("math.sqrt", x)
def tanh(x): return _unary("math.tanh", x)
def floor(x): return _unary("math.floor", x)
def ceil(x): return _unary("math.ceil", x)


def sigmoid(x):
    """1 / (1 + exp(-x))."""
    return 1.0 / (1.0 + exp(-_convert(_lift(_trace_of([x]), x), _F32)))


def log2(x): return _unary("math.log2", x)
def rsqrt(x): return _unary("math.rsqrt", x)
def sin(x): return _unary("math.sin", x)
def cos(x): return _unary("math.cos", x)
def erf(x): return _unary("math.erf", x)
def trunc(x): return _unary("math.trunc", x)
def round(x):  # noqa: A001 - torch.round's name; half to even, as torch's
    return _unary("math.roundeven", x)


def where(condition, a, b):
    """`a` where `condition` holds, else `b` (arith.select)."""
    trace = _trace_of([condition, a, b])
    c = _lift(trace, condition)
    if c.type != _BOOL:
        raise TypeError(f"attn.where: the condition is {_a(c._kind())}, "
                        "expected a boolean (a comparison)")
    if not isinstance(a, Value) and not isinstance(b, Value):
        a = _lift(trace, a)
    a, b, type_ = _common(a, b, numeric=False)
    return trace.emit(f"arith.select {c.name}, {a.name}, {b.name} : {type_}",
                      type_)


def _extremum(a, b, float_op: str, int_op: str) -> Value:
    _trace_of([a, b])
    a, b, type_ = _common(a, b)
    op = float_op if type_ == _F32 else int_op
    return a.trace.emit(f"{op} {a.name}, {b.name} : {type_}", type_)


def minimum(a, b):
    """The smaller of `a` and `b` (a NaN wins, as in torch.minimum)."""
    return _extremum(a, b, "arith.minimumf", "arith.minsi")


def maximum(a, b):
    """The larger of `a` and `b` (a NaN wins, as in torch.maximum)."""
    return _extremum(a, b, "arith.maximumf", "arith.maxsi")


def clamp(x, min=None, max=None):  # noqa: A002 - torch.clamp's names
    """`x` clamped into [min, max] (either may be None), as torch.clamp."""
    if min is not None:
        x = maximum(x, min)
    if max is not None:
        x = minimum(x, max)
    return x


def sign(x):
    """-1, 0 or 1 as `x` is negative, zero or positive, of `x`'s kind (a
    NaN gives 0; torch.sign gives NaN)."""
    trace = _trace_of([x])
    x = _lift(trace, x)
    return where(x > 0, _full_like(x, 1), where(x < 0, _full_like(x, -1),
                                                  _full_like(x, 0)))


def div(a, b, rounding_mode=None):
    """torch.div: `a / b` as floats, or rounded "floor" (`a // b`) or
    "trunc" (toward zero; integers stay integers)."""
    if rounding_mode is None:
        return a / b
    if rounding_mode == "floor":
        return a // b
    if rounding_mode != "trunc":
        raise TypeError(f"attn variant: torch.div: rounding_mode "
                        f"{rounding_mode!r}; expected None, 'floor' or 'trunc'")
    trace = _trace_of([a, b])
    a, b, type_ = _common(a, b)
    if type_ == _F32:
        return trunc(a / b)
    # Toward zero is floor plus one where the signs differ and b does not
    # divide a; a divisor of 0 keeps //'s defined 0.
    q = a // b
    inexact = (q * b != a) & ((a < 0) ^ (b < 0)) & (b != 0)
    return where(inexact, q + 1, q)


def _min_or_max(pairwise, name):
    def reduce(*args, **kwargs):
        if len(args) == 2 and not kwargs:
            return pairwise(*args)
        raise TypeError(
            f"attn variant: torch.{name} of one traced value reduces over "
            f"dimensions a traced scalar does not have; torch.{name}(a, b) "
            f"and torch.{name}imum(a, b) take two values")
    return reduce


def _full_like(x, value):
    """`value` as a constant of `x`'s kind (torch.full_like and kin)."""
    trace = _trace_of([x])
    kind = _lift(trace, x).type
    return trace.constant(bool(value) if kind == _BOOL else value, kind)


# The torch functions a traced function may call on traced values
# (Value.__torch_function__), by name.
_TORCH_FUNCTIONS: dict[str, Callable] = {
    "where": where, "exp": exp, "exp2": exp2, "log": log, "log2": log2,
    "sqrt": sqrt, "rsqrt": rsqrt, "tanh": tanh, "sigmoid": sigmoid,
    "sin": sin, "cos": cos, "erf": erf, "floor": floor, "ceil": ceil,
    "trunc": trunc, "round": round, "abs": lambda x: abs(x),
    "neg": lambda x: -x, "negative": lambda x: -x,
    "minimum": minimum, "maximum": maximum, "clamp": clamp, "clip": clamp,
    "min": _min_or_max(minimum, "min"), "max": _min_or_max(maximum, "max"),
    "sign": sign,
    "clamp_min": lambda x, m: clamp(x, min=m),
    "clamp_max": lambda x, m: clamp(x, max=m),
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b, "div": div, "divide": div,
    "true_divide": lambda a, b: a / b, "floor_divide": lambda a, b: a // b,
    "pow": lambda a, b: a ** b,
    "remainder": lambda a, b: a % b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "logical_and": lambda a, b: a & b, "logical_or": lambda a, b: a | b,
    "logical_xor": lambda a, b: a ^ b, "logical_not": lambda a: ~a,
    "zeros_like": lambda x, **_: _full_like(x, 0),
    "ones_like": lambda x, **_: _full_like(x, 1),
    "full_like": lambda x, value, **_: _full_like(x, value),
}


# torch.Tensor's methods of the same names: x.abs(), x.clamp(min=0), ...;
# x.where(c, y) is torch.where(c, x, y). The *_like functions are not
# methods.
_TENSOR_METHODS: dict[str, Callable] = {
    name: f for name, f in _TORCH_FUNCTIONS.items()
    if not name.endswith("_like")}
_TENSOR_METHODS["where"] = lambda x, condition, y: where(condition, x, y)


def _trace(fn: Callable, score: bool, inputs: dict[str, Input]) -> dict:
    kind = "score_mod" if score else "mask_mod"
    fixed = ["s", "b", "h", "qp", "kp"] if score else ["b", "h", "qp", "kp"]
    for name, spec in inputs.items():
        if not isinstance(spec, Input):
            raise TypeError(f"attn.{kind}: input '{name}' must be an "
                            f"attn.Input, got {type(spec).__name__}")
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = None
    if params is not None and len(params) != len(fixed) + len(inputs):
        raise TypeError(
            f"attn.{kind}: {getattr(fn, '__name__', 'the function')} takes "
            f"{len(params)} arguments; expected ({', '.join(fixed)}) and "
            f"then the inputs ({', '.join(inputs) or 'none declared'})")
    trace = _Trace()
    args = [Value(trace, f"%{n}", _F32 if n == "s" else _INDEX) for n in fixed]
    # SSA names by position: a Python name need not be a valid MLIR one.
    tensors = {name: TensorInput(trace, f"%in{i}", name, spec)
               for i, (name, spec) in enumerate(inputs.items())}
    try:
        returned = fn(*args, *tensors.values())
    except (TypeError, IndexError, AttributeError) as e:
        if str(e).startswith("attn"):
            if isinstance(e, AttributeError):
                raise TypeError(str(e)) from e
            raise
        # Most often an array the function captured, indexed by a traced
        # position (NumPy and PyTorch replace our TypeError with theirs).
        raise TypeError(
            f"attn.{kind}: tracing {getattr(fn, '__name__', 'the function')} "
            f"raised {type(e).__name__}: {e}; a traced function computes on "
            "the symbolic values it is given and reads tensors only through "
            "arguments declared with attn.Input, not arrays it captured") from e
    result = _lift(trace, returned)
    want = _F32 if score else _BOOL
    if not score and result.type != _BOOL:
        raise TypeError(f"attn.mask_mod: the function returns "
                        f"{_a(result._kind())}; expected a boolean (whether the "
                        "key is visible), e.g. a comparison")
    result = _convert(result, want)
    signature = [f"%{n}: {'f32' if n == 's' else 'index'}" for n in fixed]
    signature += [f"{t.ssa}: {t.spec.mlir_type()} {{attn.name = \"{name}\"}}"
                  for name, t in tensors.items()]
    text = "\n".join(
        [f"func.func @{kind}({', '.join(signature)}) -> {want} {{"]
        + trace.lines + [f"  return {result.name} : {want}", "}"])
    return {"func": text}


def score_mod(fn: Callable, **inputs: Input) -> dict:
    """The `score_mod` of a model description's attention layer from
    `fn(s, b, h, qp, kp, *inputs)`, which returns the modified score.
    Keyword arguments declare the tensors it reads (attn.Input), passed to
    `fn` after the positions, in order. Returns `{"func": <attn IR>}`."""
    return _trace(fn, True, inputs)


def mask_mod(fn: Callable, **inputs: Input) -> dict:
    """The `mask_mod` of a model description's attention layer from
    `fn(b, h, qp, kp, *inputs)`, which returns whether key kp is visible
    to query qp (a comparison, or several joined with & | ~). Keyword
    arguments declare the tensors it reads. Returns `{"func": <attn IR>}`."""
    return _trace(fn, False, inputs)
