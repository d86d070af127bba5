// ALiBi (Press et al., 2022; BLOOM's slopes) as a score_mod region: each
// score is penalized linearly in the distance between query and key,
// s - m_h * (qp - kp), with m_h = 2^(-8 (h + 1) / H) for a power-of-two H.
// Compile it with `attnc alibi.mlir -o alibi.attnb`; the model description
// key `"score_mod": "alibi"` builds the same region (for any H).
func.func @alibi(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                 %v: tensor<?x2x?x64xf32>) -> tensor<?x8x?x64xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        // m_h = 2^(-(h + 1)), since 8 / H = 1.
        %c1 = arith.constant 1 : index
        %steps = arith.addi %h, %c1 : index
        %stepsi = arith.index_cast %steps : index to i32
        %stepsf = arith.sitofp %stepsi : i32 to f32
        %exponent = arith.negf %stepsf : f32
        %slope = math.exp2 %exponent : f32
        %distance = arith.subi %qp, %kp : index
        %di = arith.index_cast %distance : index to i32
        %df = arith.sitofp %di : i32 to f32
        %penalty = arith.mulf %slope, %df : f32
        %r = arith.subf %s, %penalty : f32
        attn.yield %r : f32
      }
  return %o : tensor<?x8x?x64xf32>
}
