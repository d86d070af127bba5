// RUN: attn-opt %s -split-input-file -attn-gpu-dispatches -verify-diagnostics

// What the CUDA kernels do not run is refused with the op's location.

func.func @sum(%o: tensor<?x2x?x16xf32>, %g: tensor<?x2x?x16xf32>)
    -> tensor<?x2x?x16xf32> {
  // expected-error @below {{no CUDA lowering for 'arith.addf' yet}}
  %r = arith.addf %o, %g : tensor<?x2x?x16xf32>
  return %r : tensor<?x2x?x16xf32>
}

// -----

// attn.gate's kernels are built for its heads, features and kind of gate.
func.func @dynamic_gate(%o: tensor<?x2x?x?xf32>, %g: tensor<?x2x?x?xf32>)
    -> tensor<?x2x?x?xf32> {
  // expected-error @below {{no CUDA lowering for an 'attn.gate' with a dynamic head count or feature size (dims 1 and 3 of the output and dim 3 of the gate must be static)}}
  %r = attn.gate %o, %g : tensor<?x2x?x?xf32>, tensor<?x2x?x?xf32>
  return %r : tensor<?x2x?x?xf32>
}

// -----

// Top-k's per-page metadata is checked against the cache that another op
// of the entry reads through the same page table; alone it has none.
func.func @topk_pages_without_cache(%q: tensor<?x4x?x16xf32>,
                                    %meta: tensor<?x2x2x16xf32>,
                                    %pt: tensor<?x5xi32>, %lens: tensor<?xi32>)
    -> tensor<?x4x?x2xi32> {
  // expected-error @below {{attn.select_topk over a paged cache: its 'page_table' must also index a key cache in the entry}}
  %b = attn.select_topk %q, %meta paged(%pt, %lens : tensor<?x5xi32>, tensor<?xi32>) {block_size = 8, top_k = 2, mask = #attn.mask<causal>} : tensor<?x4x?x16xf32>, tensor<?x2x2x16xf32>
  return %b : tensor<?x4x?x2xi32>
}

