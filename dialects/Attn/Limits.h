//===- Limits.h - Bounds on the sizes attn compiles ------------*- C++ -*-===//
//
// Every size the compiler derives (stack tiles of the CPU kernels, unrolled
// loops, shared memory, grids, temporaries) is a product of these numbers,
// so bounding them keeps compilation finite and every index of the
// generated code within its integer type. The frontend checks a model
// description against them (an error naming its JSON path and the bound);
// attn IR written by hand meets the same bounds in the op verifiers and
// the entry lowering. docs/limits.md lists them for users.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_DIALECT_LIMITS_H
#define ATTN_DIALECT_LIMITS_H

#include <cstdint>

namespace mlir::attn::limits {

/// head_dim, value_dim, k_dim, v_dim (FlashAttention and FLA stop at 256;
/// DeepSeek's latent keys have 512 + 64 features).
constexpr int64_t kMaxFeatureDim = 576;
/// num_heads, num_kv_heads, num_k_heads, num_v_heads.
constexpr int64_t kMaxHeads = 1024;
/// Layers of a description, and num_hidden_layers of a Hugging Face config.
constexpr int64_t kMaxLayers = 4096;
/// Nesting of JSON arrays and objects (a description nests 4 deep).
constexpr int64_t kMaxJsonDepth = 64;
/// Bytes of a JSON input.
constexpr int64_t kMaxJsonBytes = 64 << 20;
/// sliding_window, min_tokens, max_tokens: positions are 32-bit in the
/// kernels (i32 token indices).
constexpr int64_t kMaxTokens = (int64_t(1) << 31) - 1;
/// block_size of a sparsity budget.
constexpr int64_t kMaxBlockSize = 4096;
/// top_k, sink_blocks and local_blocks, in blocks; at run time a budget is
/// also capped by the blocks the keys have.
constexpr int64_t kMaxBudgetBlocks = int64_t(1) << 20;
/// R of a {"relative_bias": R} score_mod: its table has 2R + 1 columns.
constexpr int64_t kMaxRelativeBiasRadius = 65536;
/// Bytes of the attn IR of a {"func": ...} score_mod or mask_mod.
constexpr int64_t kMaxVariantFuncBytes = 64 << 10;
/// speculative.max_tree_nodes.
constexpr int64_t kMaxTreeNodes = 4096;
/// speculative.max_tree_nodes of a model whose linear layers verify trees
/// (attn.tree_recurrence's max_nodes: its kernels hold T x T tiles).
constexpr int64_t kMaxTreeRecurrenceNodes = 256;

} // namespace mlir::attn::limits

#endif // ATTN_DIALECT_LIMITS_H
