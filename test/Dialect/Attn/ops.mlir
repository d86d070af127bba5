// RUN: attn-opt %s | attn-opt | FileCheck %s
// RUN: attn-opt %s --mlir-print-op-generic | attn-opt | FileCheck %s
// RUN: attn-opt %s --emit-bytecode | attn-opt | FileCheck %s

// Every op of the dialect, with each of its optional parts, round-trips
// through the custom, generic and bytecode forms.

// CHECK-LABEL: func @sdpa_plain
// CHECK: %[[O:.+]] = attn.sdpa %{{.+}}, %{{.+}}, %{{.+}} {mask = #attn.mask<causal>} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
// CHECK: return %[[O]] : tensor<?x8x?x64xf32>
func.func @sdpa_plain(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                      %v: tensor<?x2x?x64xf32>) -> tensor<?x8x?x64xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}

// CHECK-LABEL: func @sdpa_everything
// CHECK: %{{.+}}, %[[LSE:.+]] = attn.sdpa %{{.+}}, %{{.+}}, %{{.+}} gate(%{{.+}}) {mask = #attn.mask<sliding_window = 128>, return_lse, scale = 1.250000e-01 : f64, softcap = 3.000000e+01 : f64} : tensor<2x8x5x80xbf16>, tensor<2x1x9x80xbf16>, tensor<2x1x9x48xbf16>, tensor<2x8x5x48xbf16>
// CHECK: return %{{.+}}, %[[LSE]] : tensor<2x8x5x48xbf16>, tensor<2x8x5xf32>
func.func @sdpa_everything(%q: tensor<2x8x5x80xbf16>, %k: tensor<2x1x9x80xbf16>,
                           %v: tensor<2x1x9x48xbf16>, %g: tensor<2x8x5x48xbf16>)
    -> (tensor<2x8x5x48xbf16>, tensor<2x8x5xf32>) {
  %o, %lse = attn.sdpa %q, %k, %v gate(%g)
      {mask = #attn.mask<sliding_window = 128>, scale = 0.125, softcap = 30.0,
       return_lse}
      : tensor<2x8x5x80xbf16>, tensor<2x1x9x80xbf16>, tensor<2x1x9x48xbf16>,
        tensor<2x8x5x48xbf16>
  return %o, %lse : tensor<2x8x5x48xbf16>, tensor<2x8x5xf32>
}

// CHECK-LABEL: func @sdpa_chunked_sinks
// CHECK: attn.sdpa %{{.+}}, %{{.+}}, %{{.+}} sinks(%{{.+}} : tensor<8xf32>) {mask = #attn.mask<chunked = 8192>} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
func.func @sdpa_chunked_sinks(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                              %v: tensor<?x2x?x64xf32>, %s: tensor<8xf32>)
    -> tensor<?x8x?x64xf32> {
  %o = attn.sdpa %q, %k, %v sinks(%s : tensor<8xf32>)
      {mask = #attn.mask<chunked = 8192>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
  return %o : tensor<?x8x?x64xf32>
}

// CHECK-LABEL: func @tree_sdpa_chunked
// CHECK: attn.tree_sdpa %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {chunk = 64 : i64} : tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x?xi32>
func.func @tree_sdpa_chunked(%q: tensor<?x4x?x16xf32>, %k: tensor<?x4x?x16xf32>,
                             %v: tensor<?x4x?x16xf32>, %p: tensor<?x?xi32>)
    -> tensor<?x4x?x16xf32> {
  %o = attn.tree_sdpa %q, %k, %v, %p {chunk = 64}
      : tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>,
        tensor<?x?xi32>
  return %o : tensor<?x4x?x16xf32>
}

// CHECK-LABEL: func @sdpa_no_mask_headwise_gate
// CHECK: attn.sdpa %{{.+}}, %{{.+}}, %{{.+}} gate(%{{.+}}) {mask = #attn.mask<none>} : tensor<1x4x1x64xf16>, tensor<1x4x?x64xf16>, tensor<1x4x?x64xf16>, tensor<1x4x1x1xf16>
func.func @sdpa_no_mask_headwise_gate(%q: tensor<1x4x1x64xf16>,
    %k: tensor<1x4x?x64xf16>, %v: tensor<1x4x?x64xf16>,
    %g: tensor<1x4x1x1xf16>) -> tensor<1x4x1x64xf16> {
  %o = attn.sdpa %q, %k, %v gate(%g) {mask = #attn.mask<none>}
      : tensor<1x4x1x64xf16>, tensor<1x4x?x64xf16>, tensor<1x4x?x64xf16>,
        tensor<1x4x1x1xf16>
  return %o : tensor<1x4x1x64xf16>
}

// CHECK-LABEL: func @gate
// CHECK: %[[R:.+]] = attn.gate %{{.+}}, %{{.+}} : tensor<?x8x?x64xf32>, tensor<?x8x?x1xf32>
// CHECK: return %[[R]] : tensor<?x8x?x64xf32>
func.func @gate(%o: tensor<?x8x?x64xf32>, %g: tensor<?x8x?x1xf32>)
    -> tensor<?x8x?x64xf32> {
  %r = attn.gate %o, %g : tensor<?x8x?x64xf32>, tensor<?x8x?x1xf32>
  return %r : tensor<?x8x?x64xf32>
}

// Falcon-H1's mixer without its norm: (o + d[h] x) silu(z).
// CHECK-LABEL: func @silu_gate_skip
// CHECK: attn.gate %{{.+}}, %{{.+}} skip(%{{.+}}, %{{.+}} : tensor<?x24x?x64xf32>, tensor<24xf32>) {activation = #attn.gate_activation<silu>} : tensor<?x24x?x64xf32>, tensor<?x24x?x64xf32>
func.func @silu_gate_skip(%o: tensor<?x24x?x64xf32>, %z: tensor<?x24x?x64xf32>,
    %x: tensor<?x24x?x64xf32>, %d: tensor<24xf32>) -> tensor<?x24x?x64xf32> {
  %r = attn.gate %o, %z skip(%x, %d : tensor<?x24x?x64xf32>, tensor<24xf32>)
      {activation = #attn.gate_activation<silu>}
      : tensor<?x24x?x64xf32>, tensor<?x24x?x64xf32>
  return %r : tensor<?x24x?x64xf32>
}

// CHECK-LABEL: func @block_meta
// CHECK: attn.block_meta %{{.+}} {block_size = 16 : i64} : tensor<3x2x33x64xf32>
// CHECK: return %{{.+}} : tensor<3x2x3x2x64xf32>, tensor<?x2x?x2x64xf32>
func.func @block_meta(%k: tensor<3x2x33x64xf32>, %kd: tensor<?x2x?x64xf32>)
    -> (tensor<3x2x3x2x64xf32>, tensor<?x2x?x2x64xf32>) {
  %m = attn.block_meta %k {block_size = 16} : tensor<3x2x33x64xf32>
  %md = attn.block_meta %kd {block_size = 16} : tensor<?x2x?x64xf32>
  return %m, %md : tensor<3x2x3x2x64xf32>, tensor<?x2x?x2x64xf32>
}

// CHECK-LABEL: func @select_topk
// CHECK: %[[B:.+]] = attn.select_topk %{{.+}}, %{{.+}}, %{{.+}} {block_size = 16 : i64, local_blocks = 1 : i64, mask = #attn.mask<causal>, sink_blocks = 1 : i64, top_k = 8 : i64} : tensor<?x8x?x64xf32>, tensor<?x2x?x2x64xf32>
// CHECK: return %[[B]] : tensor<?x8x?x?xi32>
func.func @select_topk(%q: tensor<?x8x?x64xf32>, %m: tensor<?x2x?x2x64xf32>,
                       %lk: index) -> tensor<?x8x?x?xi32> {
  %b = attn.select_topk %q, %m, %lk
      {block_size = 16, top_k = 8, sink_blocks = 1, local_blocks = 1,
       mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x2x64xf32>
  return %b : tensor<?x8x?x?xi32>
}

// A budget is capped by the blocks the metadata has.
// CHECK-LABEL: func @select_topk_capped
// CHECK: attn.select_topk
// CHECK-SAME: tensor<?x8x?x64xf32>, tensor<?x2x3x2x64xf32>
// CHECK: return %{{.+}} : tensor<?x8x?x3xi32>
func.func @select_topk_capped(%q: tensor<?x8x?x64xf32>,
                              %m: tensor<?x2x3x2x64xf32>,
                              %lk: index) -> tensor<?x8x?x3xi32> {
  %b = attn.select_topk %q, %m, %lk
      {block_size = 16, top_k = 1000000, mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x3x2x64xf32>
  return %b : tensor<?x8x?x3xi32>
}

// CHECK-LABEL: func @select_topp
// CHECK: %[[T:.+]] = attn.select_topp %{{.+}}, %{{.+}} blocks(%{{.+}}) {block_size = 16 : i64, estimator = #attn.estimator<int4>, mask = #attn.mask<causal>, max_tokens = 1024 : i64, min_tokens = 16 : i64, top_p = 0.94999999999999996 : f64} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x8x?x8xi32>
// CHECK: %[[U:.+]] = attn.select_topp %{{.+}}, %{{.+}} {mask = #attn.mask<none>, top_p = 5.000000e-01 : f64} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>
// CHECK: return %[[T]], %[[U]] : tensor<?x8x?x1024xi32>, tensor<?x8x?x?xi32>
func.func @select_topp(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                       %blocks: tensor<?x8x?x8xi32>)
    -> (tensor<?x8x?x1024xi32>, tensor<?x8x?x?xi32>) {
  %t = attn.select_topp %q, %k blocks(%blocks)
      {top_p = 0.95, min_tokens = 16, max_tokens = 1024, block_size = 16,
       estimator = #attn.estimator<int4>, mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x8x?x8xi32>
  %u = attn.select_topp %q, %k {top_p = 0.5, mask = #attn.mask<none>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>
  return %t, %u : tensor<?x8x?x1024xi32>, tensor<?x8x?x?xi32>
}

// CHECK-LABEL: func @sparse_sdpa
// CHECK: %{{.+}}, %[[LSE:.+]] = attn.sparse_sdpa %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} gate(%{{.+}}) {block_size = 16 : i64, mask = #attn.mask<causal>, return_lse} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x8x?x8xi32>, tensor<?x8x?x64xf32>
// CHECK: return %{{.+}}, %[[LSE]] : tensor<?x8x?x64xf32>, tensor<?x8x?xf32>
func.func @sparse_sdpa(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                       %v: tensor<?x2x?x64xf32>, %sel: tensor<?x8x?x8xi32>,
                       %g: tensor<?x8x?x64xf32>)
    -> (tensor<?x8x?x64xf32>, tensor<?x8x?xf32>) {
  %o, %lse = attn.sparse_sdpa %q, %k, %v, %sel gate(%g)
      {block_size = 16, mask = #attn.mask<causal>, return_lse}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x8x?x8xi32>, tensor<?x8x?x64xf32>
  return %o, %lse : tensor<?x8x?x64xf32>, tensor<?x8x?xf32>
}

// CHECK-LABEL: func @tree_sdpa
// CHECK: attn.tree_sdpa %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x?xi32>
// CHECK: attn.tree_sdpa %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} gate(%{{.+}}) {window = 256 : i64} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x?xi32>, tensor<?x8x?x1xf32>
func.func @tree_sdpa(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                     %v: tensor<?x2x?x64xf32>, %parents: tensor<?x?xi32>,
                     %g: tensor<?x8x?x1xf32>)
    -> (tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>) {
  %o = attn.tree_sdpa %q, %k, %v, %parents
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x?xi32>
  %w = attn.tree_sdpa %q, %k, %v, %parents gate(%g) {window = 256}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>,
        tensor<?x?xi32>, tensor<?x8x?x1xf32>
  return %o, %w : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
}

// CHECK-LABEL: func @tree_accept
// CHECK: %[[P:.+]], %[[L:.+]], %[[B:.+]] = attn.tree_accept %{{.+}}, %{{.+}}, %{{.+}} : tensor<?x16xi32>, tensor<?x16xi32>, tensor<?x16xi32>
// CHECK: return %[[P]], %[[L]], %[[B]] : tensor<?x16xi32>, tensor<?xi32>, tensor<?xi32>
func.func @tree_accept(%tokens: tensor<?x16xi32>, %target: tensor<?x16xi32>,
                       %parents: tensor<?x16xi32>)
    -> (tensor<?x16xi32>, tensor<?xi32>, tensor<?xi32>) {
  %path, %length, %bonus = attn.tree_accept %tokens, %target, %parents
      : tensor<?x16xi32>, tensor<?x16xi32>, tensor<?x16xi32>
  return %path, %length, %bonus : tensor<?x16xi32>, tensor<?xi32>, tensor<?xi32>
}

// CHECK-LABEL: func @kv_compact
// CHECK: %[[K:.+]], %[[V:.+]] = attn.kv_compact %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} : tensor<?x2x?x64xf32>, tensor<?x2x?x32xf32>, tensor<?x?xi32>, tensor<?xi32>
// CHECK: return %[[K]], %[[V]] : tensor<?x2x?x64xf32>, tensor<?x2x?x32xf32>
func.func @kv_compact(%k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x32xf32>,
                      %path: tensor<?x?xi32>, %length: tensor<?xi32>)
    -> (tensor<?x2x?x64xf32>, tensor<?x2x?x32xf32>) {
  %k2, %v2 = attn.kv_compact %k, %v, %path, %length
      : tensor<?x2x?x64xf32>, tensor<?x2x?x32xf32>, tensor<?x?xi32>,
        tensor<?xi32>
  return %k2, %v2 : tensor<?x2x?x64xf32>, tensor<?x2x?x32xf32>
}

// A latent cache: the keys alone, whose leading features are the values.
// CHECK-LABEL: func @kv_compact_latent
// CHECK: %[[KV:.+]] = attn.kv_compact %{{.+}}, %{{.+}}, %{{.+}} : tensor<?x1x?x576xf32>, tensor<?x?xi32>, tensor<?xi32>
// CHECK: return %[[KV]] : tensor<?x1x?x576xf32>
func.func @kv_compact_latent(%kv: tensor<?x1x?x576xf32>,
                             %path: tensor<?x?xi32>, %length: tensor<?xi32>)
    -> tensor<?x1x?x576xf32> {
  %kv2 = attn.kv_compact %kv, %path, %length
      : tensor<?x1x?x576xf32>, tensor<?x?xi32>, tensor<?xi32>
  return %kv2 : tensor<?x1x?x576xf32>
}

// CHECK-LABEL: func @kv_append_latent
// CHECK: %[[KVC:.+]] = attn.kv_append %{{.+}}, %{{.+}} into %{{.+}} : tensor<?x1x576xbf16>, tensor<?xi32>, tensor<?x64x1x576xbf16>
// CHECK: return %[[KVC]]
func.func @kv_append_latent(%kv: tensor<?x1x576xbf16>, %slots: tensor<?xi32>,
                            %cache: tensor<?x64x1x576xbf16>)
    -> tensor<?x64x1x576xbf16> {
  %cache2 = attn.kv_append %kv, %slots into %cache
      : tensor<?x1x576xbf16>, tensor<?xi32>, tensor<?x64x1x576xbf16>
  return %cache2 : tensor<?x64x1x576xbf16>
}

// CHECK-LABEL: func @linear_recurrence_rules
// CHECK: attn.linear_recurrence linear %{{.+}}, %{{.+}}, %{{.+}} state(%{{.+}} : tensor<?x8x64x32xf32>) : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x32xf32>
// CHECK: attn.linear_recurrence decay %{{.+}}, %{{.+}}, %{{.+}} decay(%{{.+}} : tensor<?x8x?xf32>) state(%{{.+}} : tensor<?x8x64x32xf32>) {chunk_size = 32 : i64, scale = 5.000000e-01 : f64}
// CHECK: attn.linear_recurrence gla %{{.+}}, %{{.+}}, %{{.+}} decay(%{{.+}} : tensor<?x8x?x64xf32>) state(%{{.+}} : tensor<?x8x64x32xf32>) {chunk_size = 16 : i64}
// CHECK: attn.linear_recurrence delta %{{.+}}, %{{.+}}, %{{.+}} beta(%{{.+}} : tensor<?x8x?xf32>) state(%{{.+}} : tensor<?x8x64x32xf32>) {chunk_size = 128 : i64}
// CHECK: %[[O:.+]], %[[S:.+]] = attn.linear_recurrence gated_delta %{{.+}}, %{{.+}}, %{{.+}} decay(%{{.+}} : tensor<?x8x?xf32>) beta(%{{.+}} : tensor<?x8x?xf32>) state(%{{.+}} : tensor<?x8x64x32xf32>) output_gate(%{{.+}}, %{{.+}} : tensor<?x8x?x32xf32>, tensor<32xf32>) {qk_l2norm}
// CHECK: attn.linear_recurrence kda %{{.+}}, %{{.+}}, %{{.+}} decay(%{{.+}} : tensor<?x8x?x64xf32>) beta(%{{.+}} : tensor<?x8x?xf32>) state(%{{.+}} : tensor<?x8x64x32xf32>) {qk_l2norm}
// CHECK: return %[[O]], %[[S]] : tensor<?x8x?x32xf32>, tensor<?x8x64x32xf32>
func.func @linear_recurrence_rules(%q: tensor<?x4x?x64xf32>,
    %k: tensor<?x4x?x64xf32>, %v: tensor<?x8x?x32xf32>,
    %g: tensor<?x8x?xf32>, %gv: tensor<?x8x?x64xf32>,
    %beta: tensor<?x8x?xf32>, %s0: tensor<?x8x64x32xf32>,
    %z: tensor<?x8x?x32xf32>, %w: tensor<32xf32>)
    -> (tensor<?x8x?x32xf32>, tensor<?x8x64x32xf32>) {
  %o0, %s0o = attn.linear_recurrence linear %q, %k, %v
      state(%s0 : tensor<?x8x64x32xf32>)
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x32xf32>
  %o1, %s1 = attn.linear_recurrence decay %q, %k, %v
      decay(%g : tensor<?x8x?xf32>) state(%s0 : tensor<?x8x64x32xf32>)
      {chunk_size = 32, scale = 0.5}
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x32xf32>
  %o2, %s2 = attn.linear_recurrence gla %q, %k, %v
      decay(%gv : tensor<?x8x?x64xf32>) state(%s0 : tensor<?x8x64x32xf32>)
      {chunk_size = 16}
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x32xf32>
  %o3, %s3 = attn.linear_recurrence delta %q, %k, %v
      beta(%beta : tensor<?x8x?xf32>) state(%s0 : tensor<?x8x64x32xf32>)
      {chunk_size = 128}
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x32xf32>
  %o4, %s4 = attn.linear_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x8x?xf32>) beta(%beta : tensor<?x8x?xf32>)
      state(%s0 : tensor<?x8x64x32xf32>)
      output_gate(%z, %w : tensor<?x8x?x32xf32>, tensor<32xf32>)
      {qk_l2norm, gate_eps = 1.0e-6}
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x32xf32>
  %o5, %s5 = attn.linear_recurrence kda %q, %k, %v
      decay(%gv : tensor<?x8x?x64xf32>) beta(%beta : tensor<?x8x?xf32>)
      state(%s0 : tensor<?x8x64x32xf32>) {chunk_size = 64, qk_l2norm}
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x32xf32>
  return %o4, %s4 : tensor<?x8x?x32xf32>, tensor<?x8x64x32xf32>
}

// CHECK-LABEL: func @rmsnorm_gate
// CHECK: %[[R:.+]] = attn.rmsnorm_gate %{{.+}}, %{{.+}}, %{{.+}} {eps = 1.000000e-05 : f64} : tensor<?x8x?x32xbf16>, tensor<?x8x?x32xbf16>, tensor<32xbf16>
// CHECK: return %[[R]] : tensor<?x8x?x32xbf16>
func.func @rmsnorm_gate(%o: tensor<?x8x?x32xbf16>, %z: tensor<?x8x?x32xbf16>,
                        %w: tensor<32xbf16>) -> tensor<?x8x?x32xbf16> {
  %r = attn.rmsnorm_gate %o, %z, %w {eps = 1.0e-5}
      : tensor<?x8x?x32xbf16>, tensor<?x8x?x32xbf16>, tensor<32xbf16>
  return %r : tensor<?x8x?x32xbf16>
}

// CHECK-LABEL: func @rmsnorm_gate_grouped
// CHECK: attn.rmsnorm_gate %{{.+}}, %{{.+}}, %{{.+}} {eps = 1.000000e-05 : f64, group_size = 1024 : i64, norm_before_gate = false} : tensor<?x128x?x64xbf16>, tensor<?x128x?x64xbf16>, tensor<8192xbf16>
func.func @rmsnorm_gate_grouped(%o: tensor<?x128x?x64xbf16>,
    %z: tensor<?x128x?x64xbf16>, %w: tensor<8192xbf16>)
    -> tensor<?x128x?x64xbf16> {
  %r = attn.rmsnorm_gate %o, %z, %w
      {eps = 1.0e-5, group_size = 1024, norm_before_gate = false}
      : tensor<?x128x?x64xbf16>, tensor<?x128x?x64xbf16>, tensor<8192xbf16>
  return %r : tensor<?x128x?x64xbf16>
}

// CHECK-LABEL: func @rmsnorm_gate_skip
// CHECK: attn.rmsnorm_gate %{{.+}}, %{{.+}}, %{{.+}} skip(%{{.+}}, %{{.+}} : tensor<?x8x?x32xf32>, tensor<8xf32>) {group_size = 64 : i64, norm_before_gate = false} : tensor<?x8x?x32xf32>, tensor<?x8x?x32xf32>, tensor<256xf32>
func.func @rmsnorm_gate_skip(%o: tensor<?x8x?x32xf32>, %z: tensor<?x8x?x32xf32>,
    %w: tensor<256xf32>, %x: tensor<?x8x?x32xf32>, %d: tensor<8xf32>)
    -> tensor<?x8x?x32xf32> {
  %r = attn.rmsnorm_gate %o, %z, %w skip(%x, %d : tensor<?x8x?x32xf32>,
      tensor<8xf32>) {group_size = 64, norm_before_gate = false}
      : tensor<?x8x?x32xf32>, tensor<?x8x?x32xf32>, tensor<256xf32>
  return %r : tensor<?x8x?x32xf32>
}

// CHECK-LABEL: func @rmsnorm_sigmoid_gate
// CHECK: attn.rmsnorm_gate %{{.+}}, %{{.+}}, %{{.+}} {activation = #attn.gate_activation<sigmoid>} : tensor<?x8x?x32xf32>
func.func @rmsnorm_sigmoid_gate(%o: tensor<?x8x?x32xf32>,
    %z: tensor<?x8x?x32xf32>, %w: tensor<32xf32>) -> tensor<?x8x?x32xf32> {
  %r = attn.rmsnorm_gate %o, %z, %w {activation = #attn.gate_activation<sigmoid>}
      : tensor<?x8x?x32xf32>, tensor<?x8x?x32xf32>, tensor<32xf32>
  return %r : tensor<?x8x?x32xf32>
}

// The variant regions (SPEC §7) print after the types with their arguments
// named s, b, h, qp, kp.
// CHECK-LABEL: func @sdpa_variant_regions
// CHECK: attn.sdpa %{{.+}}, %{{.+}}, %{{.+}} {mask = #attn.mask<causal>} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32> score_mod {
// CHECK-NEXT: ^bb0(%[[S:.+]]: f32, %{{.+}}: index, %[[H:.+]]: index, %[[QP:.+]]: index, %[[KP:.+]]: index):
// CHECK-NEXT: %[[D:.+]] = arith.subi %[[KP]], %[[QP]] : index
// CHECK: %[[BIAS:.+]] = tensor.extract %{{.+}}[%[[H]]] : tensor<8xf32>
// CHECK: attn.yield %{{.+}} : f32
// CHECK-NEXT: } mask_mod {
// CHECK-NEXT: ^bb0(%[[B:.+]]: index, %{{.+}}: index, %[[MQP:.+]]: index, %[[MKP:.+]]: index):
// CHECK-NEXT: tensor.extract %{{.+}}[%[[B]], %[[MQP]]] : tensor<?x?xi32>
// CHECK: attn.yield %{{.+}} : i1
func.func @sdpa_variant_regions(%q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>,
                                %v: tensor<?x2x?x64xf32>, %slopes: tensor<8xf32>,
                                %doc: tensor<?x?xi32>) -> tensor<?x8x?x64xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %d = arith.subi %kp, %qp : index
        %di = arith.index_cast %d : index to i32
        %df = arith.sitofp %di : i32 to f32
        %m = tensor.extract %slopes[%h] : tensor<8xf32>
        %r = math.fma %m, %df, %s : f32
        attn.yield %r : f32
      }
      mask_mod {
      ^bb0(%b: index, %h: index, %qp: index, %kp: index):
        %dq = tensor.extract %doc[%b, %qp] : tensor<?x?xi32>
        %dk = tensor.extract %doc[%b, %kp] : tensor<?x?xi32>
        %same = arith.cmpi eq, %dq, %dk : i32
        attn.yield %same : i1
      }
  return %o : tensor<?x8x?x64xf32>
}

// CHECK-LABEL: func @sparse_and_tree_variant_regions
// CHECK: attn.sparse_sdpa {{.+}} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x8x?x8xi32> mask_mod {
// CHECK: arith.cmpi sge
// CHECK: attn.tree_sdpa {{.+}} gate(%{{.+}}) {return_lse} : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x?xi32>, tensor<?x8x?x1xf32> score_mod {
// CHECK: math.tanh
func.func @sparse_and_tree_variant_regions(
    %q: tensor<?x8x?x64xf32>, %k: tensor<?x2x?x64xf32>, %v: tensor<?x2x?x64xf32>,
    %sel: tensor<?x8x?x8xi32>, %parents: tensor<?x?xi32>, %g: tensor<?x8x?x1xf32>)
    -> (tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>, tensor<?x8x?xf32>) {
  %o = attn.sparse_sdpa %q, %k, %v, %sel {block_size = 16, mask = #attn.mask<causal>}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x8x?x8xi32>
      mask_mod {
      ^bb0(%b: index, %h: index, %qp: index, %kp: index):
        %c4 = arith.constant 4 : index
        %visible = arith.cmpi sge, %kp, %c4 : index
        attn.yield %visible : i1
      }
  %t, %lse = attn.tree_sdpa %q, %k, %v, %parents gate(%g) {return_lse}
      : tensor<?x8x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x2x?x64xf32>, tensor<?x?xi32>, tensor<?x8x?x1xf32>
      score_mod {
      ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
        %c = arith.constant 20.0 : f32
        %x = arith.divf %s, %c : f32
        %th = math.tanh %x : f32
        %r = arith.mulf %th, %c : f32
        attn.yield %r : f32
      }
  return %o, %t, %lse : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>, tensor<?x8x?xf32>
}

// CHECK-LABEL: func.func @tree_recurrence
// CHECK: attn.tree_recurrence gated_delta %{{.+}}, %{{.+}}, %{{.+}} decay(%{{.+}} : tensor<?x8x?xf32>) beta(%{{.+}} : tensor<?x8x?xf32>) parents(%{{.+}} : tensor<?x?xi32>) state(%{{.+}} : tensor<?x8x64x64xf32>) {max_nodes = 128 : i64, qk_l2norm} : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x64xf32>
// CHECK: attn.tree_recurrence linear %{{.+}}, %{{.+}}, %{{.+}} parents(%{{.+}} : tensor<?x?xi32>) state(%{{.+}} : tensor<?x8x64x64xf32>) output_gate(%{{.+}}, %{{.+}} : tensor<?x8x?x64xf32>, tensor<64xf32>) : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x64xf32>
func.func @tree_recurrence(%q: tensor<?x4x?x64xf32>, %k: tensor<?x4x?x64xf32>,
                           %v: tensor<?x8x?x64xf32>, %g: tensor<?x8x?xf32>,
                           %beta: tensor<?x8x?xf32>, %parents: tensor<?x?xi32>,
                           %s0: tensor<?x8x64x64xf32>, %z: tensor<?x8x?x64xf32>,
                           %w: tensor<64xf32>)
    -> (tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>) {
  %o = attn.tree_recurrence gated_delta %q, %k, %v
      decay(%g : tensor<?x8x?xf32>) beta(%beta : tensor<?x8x?xf32>)
      parents(%parents : tensor<?x?xi32>)
      state(%s0 : tensor<?x8x64x64xf32>) {qk_l2norm, max_nodes = 128}
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x64xf32>
  %o2 = attn.tree_recurrence linear %q, %k, %v
      parents(%parents : tensor<?x?xi32>) state(%s0 : tensor<?x8x64x64xf32>)
      output_gate(%z, %w : tensor<?x8x?x64xf32>, tensor<64xf32>)
      : tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x8x?x64xf32>
  return %o, %o2 : tensor<?x8x?x64xf32>, tensor<?x8x?x64xf32>
}

// CHECK-LABEL: func.func @path_steps
// CHECK: attn.path_steps %{{.+}}, %{{.+}}, %{{.+}} : tensor<?x4x?x64xbf16>, tensor<?x?xi32>, tensor<?xi32>
// CHECK: attn.path_steps %{{.+}}, %{{.+}}, %{{.+}} : tensor<?x8x?xf32>, tensor<?x?xi32>, tensor<?xi32>
func.func @path_steps(%k: tensor<?x4x?x64xbf16>, %g: tensor<?x8x?xf32>,
                      %path: tensor<?x?xi32>, %length: tensor<?xi32>)
    -> (tensor<?x4x?x64xbf16>, tensor<?x8x?xf32>) {
  %kp = attn.path_steps %k, %path, %length
      : tensor<?x4x?x64xbf16>, tensor<?x?xi32>, tensor<?xi32>
  %gp = attn.path_steps %g, %path, %length
      : tensor<?x8x?xf32>, tensor<?x?xi32>, tensor<?xi32>
  return %kp, %gp : tensor<?x4x?x64xbf16>, tensor<?x8x?xf32>
}
