# RUN: %attn_python %s
# Output shapes from symbolic sizes (what register_torch_ops' Meta kernel
# uses under torch.compile's dynamic shapes): for every entry of models with
# sparsity, trees, paged and ragged layouts and linear layers, on random
# sizes, Signature.symbolic_output_shapes equals the runtime's shapes, and on
# symbolic sizes it computes the same expressions without ever turning a
# size into an int or a bool (which would fix the compiled graph to it).
# Also: derived dims show as attn-run --list shows them, and what needs no
# size (count, dtype, rank, static dims) is checked.
import random

import attn

MODELS = [
    {"model": "sym-softmax", "layers": [
        {"name": "sparse", "type": "attention", "num_heads": 6,
         "num_kv_heads": 2, "head_dim": 24, "value_dim": 40,
         "gate": "headwise", "return_lse": True, "tree": True,
         "sparsity": {"method": "top_p", "block_size": 5, "top_k": 4,
                      "top_p": 0.9}},
        {"name": "paged", "type": "attention", "num_heads": 4,
         "num_kv_heads": 2, "head_dim": 16, "gate": "elementwise",
         "layout": {"ragged": True, "page_size": 7}, "return_lse": True,
         "sparsity": {"method": "top_k", "block_size": 7, "top_k": 3},
         "mask_mod": "document", "tree": True},
        {"name": "packed", "type": "attention", "num_heads": 4,
         "num_kv_heads": 1, "head_dim": 16, "layout": {"ragged": True},
         "return_lse": True, "tree": True}],
     "speculative": {"max_tree_nodes": 64}},
    {"model": "sym-linear", "layers": [
        {"name": "gdn", "type": "linear_attention", "rule": "gated_delta",
         "num_k_heads": 2, "num_v_heads": 4, "k_dim": 12, "v_dim": 20,
         "qk_l2norm": True, "output_gate": "rmsnorm_silu", "tree": True},
        {"name": "gla", "type": "linear_attention", "rule": "gla",
         "num_k_heads": 1, "num_v_heads": 2, "k_dim": 8, "v_dim": 8,
         "layout": {"ragged": True}, "tree": True}]},
]


class Size:
    """A symbolic size: arithmetic builds an expression; anything that
    would make it concrete (int(), an index, a truth value) fails."""

    def __init__(self, expr, value):
        self.expr, self.value = expr, value

    def _with(self, other, op, fn):
        other_value = other.value if isinstance(other, Size) else other
        return Size(f"({self.expr} {op} {other})", fn(self.value, other_value))

    def __add__(self, other):
        return self._with(other, "+", lambda a, b: a + b)

    def __sub__(self, other):
        return self._with(other, "-", lambda a, b: a - b)

    def __mul__(self, other):
        return self._with(other, "*", lambda a, b: a * b)

    def __floordiv__(self, other):
        return self._with(other, "//", lambda a, b: a // b)

    def _concrete(self, *_):
        raise AssertionError(f"size {self.expr} made concrete")

    __int__ = __index__ = __bool__ = __eq__ = __lt__ = __le__ = _concrete
    __hash__ = None

    def __repr__(self):
        return self.expr


def input_shapes(signature, sizes):
    """Shapes for the inputs that agree with `sizes` (symbol -> int)."""
    shapes = []
    for argument in signature.inputs:
        shape = []
        for static, (symbol, ceil_div, at_most) in zip(argument.shape,
                                                       argument._sizes):
            if static is not None:
                shape.append(static)
                continue
            size = sizes["B"] + 1 if symbol == "B+1" else sizes[symbol]
            if ceil_div:
                size = -(-size // ceil_div)
            if at_most >= 0:
                size = min(size, at_most)
            shape.append(size)
        shapes.append(shape)
    return shapes


rng = random.Random(5)
checked = 0
for description in MODELS:
    m = attn.compile(description)
    for entry in m.entries:
        signature = m.signature(entry)
        dtypes = [a.dtype for a in signature.inputs]
        # Offsets [B+1] name B, which no other input may (packed rows).
        symbols = {"B" if s == "B+1" else s for a in signature.inputs
                   for s, _, _ in a._sizes if s}
        for _ in range(3):
            sizes = {s: rng.randint(1, 40) for s in symbols}
            shapes = input_shapes(signature, sizes)
            expected = m._native.output_shapes_of(entry, shapes, dtypes)
            assert signature.symbolic_output_shapes(shapes, dtypes) \
                == expected, (entry, shapes, expected)
            # The same sizes as symbols: each input dim a Size named after
            # its input and dim, so the outputs' expressions show which input
            # dims they read.
            symbolic = [[size if isinstance(size, int) and static is not None
                         else Size(f"{a.name}.{d}", size)
                         for d, (size, static) in enumerate(zip(shape, a.shape))]
                        for a, shape in zip(signature.inputs, shapes)]
            outputs = signature.symbolic_output_shapes(symbolic, dtypes)
            values = [[s.value if isinstance(s, Size) else s for s in shape]
                      for shape in outputs]
            assert values == expected, (entry, outputs, expected)
            checked += 1

    # What needs no size is checked, naming the input.
    signature = m.signature(m.entries[0])
    shapes = input_shapes(signature, {s: 3 for a in signature.inputs
                                      for s, _, _ in a._sizes})
    dtypes = [a.dtype for a in signature.inputs]
    for broken, needle in [
            (lambda s, t: (s[:-1], t[:-1]), "expected"),
            (lambda s, t: (s, ["i32" if i == 0 else d
                               for i, d in enumerate(t)]), "dtype f32, got i32"),
            (lambda s, t: ([x[:-1] if i == 1 else x for i, x in enumerate(s)],
                           t), "expected rank"),
            (lambda s, t: ([x[:-1] + [x[-1] + 1] if i == 0 else x
                            for i, x in enumerate(s)], t), "must be")]:
        bad_shapes, bad_dtypes = broken(shapes, dtypes)
        try:
            signature.symbolic_output_shapes(bad_shapes, bad_dtypes)
            raise AssertionError(f"no error ({needle})")
        except attn.Error as e:
            assert needle in str(e), str(e)

# Derived dims read as attn-run --list writes them.
m = attn.compile(MODELS[0])
meta = m.signature("sparse.meta")
assert meta.outputs[0].symbols == ("B", "", "ceil(Lk/5)", "", ""), \
    meta.outputs[0].symbols
assert "kmeta: f32[B, 2, ceil(Lk/5), 2, 24]" in repr(meta), repr(meta)
print(f"symbolic shapes: {checked} entry calls agree with the runtime")
