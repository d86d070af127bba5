# REQUIRES: torch
# RUN: %attn_python %s
# FlexAttention's score_mod and mask_mod functions, written with PyTorch's
# functions as FlexAttention's documentation writes them (torch.where,
# torch.tanh, torch.clamp, torch.zeros_like, .to(dtype), ...), traced by
# attn.score_mod / attn.mask_mod unchanged and checked against the float64
# reference, as are attention-gym's masks written with tensor methods
# (q_x.clamp(lo, hi), (a - b).abs()); a torch function the tracer does not
# know, a captured tensor indexed by a position, or a tensor method the
# values lack, are TypeErrors that say what to do.
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "Inputs"))
import attn
from reference import attention, close

rng = np.random.default_rng(11)
H, HKV, D = 4, 2, 24
B, LQ, LK = 2, 29, 45


def model(**keys):
    layer = {"name": "attn", "type": "attention", "num_heads": H,
             "num_kv_heads": HKV, "head_dim": D}
    return attn.compile({"model": "flex", "layers": [dict(layer, **keys)]})


q = torch.from_numpy(rng.standard_normal((B, H, LQ, D)).astype(np.float32))
k = torch.from_numpy(rng.standard_normal((B, HKV, LK, D)).astype(np.float32))
v = torch.from_numpy(rng.standard_normal((B, HKV, LK, D)).astype(np.float32))


def check(what, layer, score_ref=None, mask_ref=None, mask="causal",
          extra=()):
    o = model(mask=mask, **layer)["attn"](q, k, v, *extra)
    assert isinstance(o, torch.Tensor)
    ref, _ = attention(q.numpy(), k.numpy(), v.numpy(), mask=mask,
                       score_mod=score_ref, mask_mod=mask_ref)
    close(o.numpy(), ref, 1e-5, what)


# FlexAttention's examples, verbatim but for the names.
def soft_cap(score, b, h, q_idx, kv_idx):
    score = score / 20
    score = torch.tanh(score)
    return score * 20


check("soft cap", {"score_mod": attn.score_mod(soft_cap)},
      lambda s, h, qp, kp: 20 * np.tanh(s / 20))


def relative_positional(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx).to(torch.float32) * 0.1


check("relative positional",
      {"score_mod": attn.score_mod(relative_positional)},
      lambda s, h, qp, kp: s + (qp - kp) * 0.1)


def causal_by_where(score, b, h, q_idx, kv_idx):
    return torch.where(q_idx >= kv_idx, score, -float("inf"))


check("causal by torch.where", {"score_mod": attn.score_mod(causal_by_where)},
      lambda s, h, qp, kp: np.where(qp >= kp, s, -np.inf), mask="none")

WINDOW = 9


def sliding_window_causal(b, h, q_idx, kv_idx):
    causal_mask = q_idx >= kv_idx
    window_mask = q_idx - kv_idx <= WINDOW
    return causal_mask & window_mask


check("sliding window", {"mask_mod": attn.mask_mod(sliding_window_causal)},
      mask_ref=lambda b, h, qp, kp: (qp >= kp) & (qp - kp <= WINDOW),
      mask="none")

PREFIX = 7


def prefix_lm_causal(b, h, q_idx, kv_idx):
    return torch.logical_or(kv_idx <= PREFIX, q_idx >= kv_idx)


check("prefix LM", {"mask_mod": attn.mask_mod(prefix_lm_causal)},
      mask_ref=lambda b, h, qp, kp: (kp <= PREFIX) | (qp >= kp), mask="none")


# ALiBi with its slopes as an input, torch.clamp, torch.zeros_like, .long().
slopes = torch.exp2(-torch.arange(1, H + 1, dtype=torch.float32))


def alibi_clamped(score, b, h, q_idx, kv_idx, slopes):
    bias = slopes[h] * (kv_idx - q_idx)
    bucket = torch.clamp((q_idx - kv_idx) // 4, max=3).to(torch.long)
    return torch.clamp(score + bias, min=-4.0, max=4.0) + \
        torch.zeros_like(score) + 0.01 * bucket.float()


check("alibi, clamp, zeros_like",
      {"score_mod": attn.score_mod(alibi_clamped, slopes=attn.Input([H]))},
      lambda s, h, qp, kp: np.clip(s + float(slopes[h]) * (kp - qp), -4, 4)
      + 0.01 * np.minimum((qp - kp) // 4, 3), extra=(slopes,))


# FlexAttention's and_masks and or_masks, as torch 2.5 writes them: the
# result starts as b.new_ones((), dtype=torch.bool) (new_zeros for or).
def and_masks(*mask_mods):
    def and_mask(b, h, q_idx, kv_idx):
        result = b.new_ones((), dtype=torch.bool)
        for mod in mask_mods:
            result = result & mod(b, h, q_idx, kv_idx)
        return result
    return and_mask


def or_masks(*mask_mods):
    def or_mask(b, h, q_idx, kv_idx):
        result = b.new_zeros((), dtype=torch.bool)
        for mod in mask_mods:
            result = result | mod(b, h, q_idx, kv_idx)
        return result
    return or_mask


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window(b, h, q_idx, kv_idx):
    return q_idx - kv_idx <= WINDOW


def prefix(b, h, q_idx, kv_idx):
    return kv_idx <= PREFIX


check("and_masks, or_masks",
      {"mask_mod": attn.mask_mod(or_masks(and_masks(causal, window), prefix))},
      mask_ref=lambda b, h, qp, kp: ((qp >= kp) & (qp - kp <= WINDOW))
      | (kp <= PREFIX), mask="none")


# A neighbourhood (NATTEN) mask as attention-gym writes it, with tensor
# methods: the 45 keys are a 5 x 9 canvas, each query sees the 3 x 5
# window around it, its centre clamped inside the canvas.
CANVAS_H, CANVAS_W, KERNEL_H, KERNEL_W = 5, 9, 3, 5


def natten(b, h, q_idx, kv_idx):
    q_row, q_col = q_idx // CANVAS_W, q_idx % CANVAS_W
    kv_row, kv_col = kv_idx // CANVAS_W, kv_idx % CANVAS_W
    centre_row = q_row.clamp(KERNEL_H // 2, CANVAS_H - 1 - KERNEL_H // 2)
    centre_col = q_col.clamp(KERNEL_W // 2, CANVAS_W - 1 - KERNEL_W // 2)
    return ((centre_row - kv_row).abs() <= KERNEL_H // 2) & \
        ((centre_col - kv_col).abs() <= KERNEL_W // 2)


def natten_ref(b, h, qp, kp):
    centre_row = np.clip(qp // CANVAS_W, KERNEL_H // 2,
                         CANVAS_H - 1 - KERNEL_H // 2)
    centre_col = np.clip(qp % CANVAS_W, KERNEL_W // 2,
                         CANVAS_W - 1 - KERNEL_W // 2)
    return (np.abs(centre_row - kp // CANVAS_W) <= KERNEL_H // 2) & \
        (np.abs(centre_col - kp % CANVAS_W) <= KERNEL_W // 2)


check("NATTEN by tensor methods", {"mask_mod": attn.mask_mod(natten)},
      mask_ref=natten_ref, mask="none")


# Tensor methods on scores and positions, torch.max / torch.min of two
# values, torch.div's rounding modes (toward zero on negative integers),
# torch.sign, and a per-batch bias table read at [b, h, qp, kp].
def methods(score, b, h, q_idx, kv_idx, bias):
    d = q_idx - kv_idx - 20
    toward_zero = torch.div(d, 7, rounding_mode="trunc")
    down = d.div(7, rounding_mode="floor")
    capped = score.div(3).tanh().mul(3)
    squashed = torch.max(capped, score.sigmoid().neg()).exp().log()
    return torch.min(squashed, score.abs().sqrt()) \
        + 0.1 * toward_zero.float() + 0.01 * down \
        + 0.05 * torch.sign(d).float() \
        + bias[b, h, q_idx, kv_idx].where(d.remainder(3).eq(0), 0.5) \
        + (d.lt(0).logical_and(d.ge(-9))).float().clamp_max(0.25)


bias = rng.standard_normal((B, H, LK, LK)).astype(np.float32)


def methods_ref(s, b, h, qp, kp):
    d = qp - kp - 20
    toward_zero = np.trunc(d / 7)
    capped = 3 * np.tanh(s / 3)
    squashed = np.maximum(capped, -1 / (1 + np.exp(-s)))
    return np.minimum(squashed, np.sqrt(np.abs(s))) + 0.1 * toward_zero \
        + 0.01 * (d // 7) + 0.05 * np.sign(d) \
        + np.where(d % 3 == 0, bias[b, h][qp, kp], 0.5) \
        + np.minimum(((d < 0) & (d >= -9)).astype(float), 0.25)


check("tensor methods, torch.max, div rounding, a batch's bias table",
      {"score_mod": attn.score_mod(
          methods, bias=attn.Input([None, H, None, None]))},
      methods_ref, mask="none", extra=(torch.from_numpy(bias),))


def raises(fn, text):
    try:
        fn()
    except TypeError as e:
        assert text in str(e), f"{text!r} not in {e}"
        return
    raise AssertionError(f"no TypeError ({text})")


raises(lambda: attn.score_mod(lambda s, b, h, qp, kp: torch.atan(s)),
       "torch.atan is not supported in a traced function; supported: "
       "torch.abs")
captured = torch.ones(H)
raises(lambda: attn.score_mod(lambda s, b, h, qp, kp: s + captured[h]),
       "reads tensors only through arguments declared with attn.Input")
raises(lambda: attn.score_mod(lambda s, b, h, qp, kp: s.to(torch.complex64)),
       ".to(torch.complex64): expected a torch floating, integer or bool dtype")
raises(lambda: attn.score_mod(lambda s, b, h, qp, kp: s.atan()),
       "a traced value has no 'atan'; it has .long()")
raises(lambda: attn.score_mod(lambda s, b, h, qp, kp: torch.max(s)),
       "torch.max of one traced value reduces over dimensions")
raises(lambda: attn.score_mod(
    lambda s, b, h, qp, kp: torch.div(s, 2, rounding_mode="ceil")),
    "rounding_mode 'ceil'; expected None, 'floor' or 'trunc'")
print("variants_torch: all checks passed")
