//===- HuggingFaceConfig.h - Hugging Face config.json as input --*- C++ -*-===//
//
// Reads the `config.json` of a Hugging Face model (SPEC §3; the hybrid
// Qwen3-Next, and the softmax models Llama, Mistral, Qwen2, Qwen3, Gemma 2
// and Gemma 3) into a ModelDescription with one layer per distinct layer
// kind, named after transformers' layer type: `full_attention`,
// `sliding_attention` and `linear_attention` (HuggingFaceConfig.cpp says
// how each model's keys map).
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_FRONTEND_HUGGINGFACECONFIG_H
#define ATTN_FRONTEND_HUGGINGFACECONFIG_H

#include "frontend/ModelDescription.h"

namespace mlir::attn::frontend {

/// The `model_type`s parseHuggingFaceConfig reads.
llvm::ArrayRef<llvm::StringRef> supportedHuggingFaceModelTypes();

/// Reads a Hugging Face config. Keys attn does not use are ignored (a
/// config describes the whole model); the ones it reads are checked, and
/// the error names the JSON path and what was expected. An unknown
/// `model_type` is an error naming the supported ones.
llvm::Expected<ModelDescription> parseHuggingFaceConfig(llvm::StringRef json);

/// A model description (SPEC §3) or, when the top-level object has a
/// `model_type`, a Hugging Face config.
llvm::Expected<ModelDescription> parseModelInput(llvm::StringRef json);

} // namespace mlir::attn::frontend

#endif // ATTN_FRONTEND_HUGGINGFACECONFIG_H
