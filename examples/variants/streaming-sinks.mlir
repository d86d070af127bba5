// A variant no attribute names: StreamingLLM's attention sinks (Xiao et
// al., 2024) with a per-head learned bias. A key is visible if it is one of
// the first 4 tokens or among the last 256 before the query; each head adds
// its own bias to the sinks' scores, read from `sink_bias [H]`. Decode and
// prefill, GQA and the output gate all keep working: the regions are
// inlined into every kernel.
func.func @sinks(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                 %v: tensor<?x2x?x64xf32>, %gate: tensor<?x8x?x64xf32>,
                 %sink_bias: tensor<8xf32>) -> tensor<?x8x?x64xf32> {
  %o = attn.sdpa %q, %k, %v gate(%gate) {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x8x?x64xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %c4 = arith.constant 4 : index
        %is_sink = arith.cmpi slt, %kp, %c4 : index
        %bias = tensor.extract %sink_bias[%h] : tensor<8xf32>
        %biased = arith.addf %s, %bias : f32
        %r = arith.select %is_sink, %biased, %s : f32
        attn.yield %r : f32
      }
      mask_mod {
      ^bb0(%b: index, %h: index, %qp: index, %kp: index):
        %c4 = arith.constant 4 : index
        %c256 = arith.constant 256 : index
        %is_sink = arith.cmpi slt, %kp, %c4 : index
        %start = arith.subi %qp, %c256 : index
        %recent = arith.cmpi sgt, %kp, %start : index
        %visible = arith.ori %is_sink, %recent : i1
        attn.yield %visible : i1
      }
  return %o : tensor<?x8x?x64xf32>
}
