// Document masking for packed sequences: several documents share one
// sequence and each token attends only to earlier tokens of its own
// document. `doc_ids [B, Lk]` holds each position's document; the runtime
// checks its shape (a dim read at b is B, one read at a position is Lk).
// The model description key `"mask_mod": "document"` builds the same
// region.
func.func @packed(%q: tensor<?x8x?x64xf32>, %k: tensor<?x8x?x64xf32>,
                  %v: tensor<?x8x?x64xf32>, %doc_ids: tensor<?x?xi32>)
    -> tensor<?x8x?x64xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
      mask_mod {
      ^bb0(%b: index, %h: index, %qp: index, %kp: index):
        %query_doc = tensor.extract %doc_ids[%b, %qp] : tensor<?x?xi32>
        %key_doc = tensor.extract %doc_ids[%b, %kp] : tensor<?x?xi32>
        %same = arith.cmpi eq, %query_doc, %key_doc : i32
        attn.yield %same : i1
      }
  return %o : tensor<?x8x?x64xf32>
}
