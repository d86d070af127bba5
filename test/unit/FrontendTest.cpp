//===- FrontendTest.cpp - Model descriptions to attn IR -------------------===//

#include "frontend/HuggingFaceConfig.h"
#include "frontend/ModelDescription.h"
#include "frontend/ModelToAttn.h"

#include "Attn/AttnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

#include <map>

using namespace mlir;
using namespace mlir::attn::frontend;
using mlir::attn::AttentionOpInterface;
using mlir::attn::SelectTopKOp;

namespace {

std::string readExample(llvm::StringRef name) {
  auto buffer = llvm::MemoryBuffer::getFile(std::string(ATTN_SOURCE_DIR) +
                                            "/examples/" + name.str());
  EXPECT_TRUE(static_cast<bool>(buffer)) << name.str();
  return buffer ? (*buffer)->getBuffer().str() : "";
}

/// The error message of parsing `json`, or "" if it parsed.
std::string parseError(llvm::StringRef json) {
  llvm::Expected<ModelDescription> model = parseModelDescription(json);
  if (model)
    return "";
  return llvm::toString(model.takeError());
}

/// Entry name -> its argument names, in order.
std::vector<std::pair<std::string, std::vector<std::string>>>
entrySignatures(ModuleOp module) {
  std::vector<std::pair<std::string, std::vector<std::string>>> entries;
  for (auto func : module.getOps<func::FuncOp>()) {
    std::vector<std::string> args;
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      args.push_back(func.getArgAttrOfType<StringAttr>(i, "attn.name").str());
    entries.push_back({func.getSymName().str(), args});
  }
  return entries;
}

TEST(Frontend, TinyHybridExample) {
  llvm::Expected<ModelDescription> model =
      parseModelDescription(readExample("tiny-hybrid.json"));
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  EXPECT_EQ(model->model, "tiny-hybrid");
  ASSERT_EQ(model->layers.size(), 2u);
  const auto &full = std::get<AttentionLayer>(model->layers[0]);
  EXPECT_EQ(full.numHeads, 8);
  EXPECT_EQ(full.numKvHeads, 2);
  EXPECT_EQ(full.gate, GateKind::Elementwise);
  ASSERT_TRUE(full.sparsity.has_value());
  EXPECT_EQ(full.sparsity->method, SparsityMethod::TopP);
  EXPECT_EQ(full.sparsity->topK, 64);
  EXPECT_EQ(full.sparsity->maxTokens, 1024);
  EXPECT_FALSE(full.scale.has_value());
  const auto &gdn = std::get<LinearAttentionLayer>(model->layers[1]);
  EXPECT_EQ(gdn.rule, Rule::GatedDelta);
  EXPECT_EQ(gdn.numVHeads, 8);
  EXPECT_TRUE(gdn.qkL2Norm);
  EXPECT_EQ(model->maxTreeNodes, 64);

  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  using Args = std::vector<std::string>;
  std::vector<std::pair<std::string, Args>> expected = {
      {"full0", Args{"q", "k", "v", "gate", "kmeta"}},
      {"full0.meta", Args{"k"}},
      {"full0.tree", Args{"q", "k", "v", "parents", "gate"}},
      {"full0.compact", Args{"k", "v", "path", "length"}},
      {"gdn0", Args{"q", "k", "v", "g", "beta", "S_init", "z", "w"}},
      {"verify.accept", Args{"tokens", "target", "parents"}}};
  EXPECT_EQ(entrySignatures(*module), expected);
}

TEST(Frontend, DefaultsOfAMinimalLayer) {
  llvm::Expected<ModelDescription> model = parseModelDescription(R"({
    "model": "m", "layers": [
      {"name": "a", "type": "attention", "num_heads": 4, "head_dim": 80},
      {"name": "r", "type": "linear_attention", "rule": "linear",
       "num_k_heads": 2, "k_dim": 16}]})");
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  EXPECT_EQ(model->dtype, ElementType::F32);
  const auto &a = std::get<AttentionLayer>(model->layers[0]);
  EXPECT_EQ(a.numKvHeads, 4);
  EXPECT_EQ(a.valueDim, 80);
  EXPECT_EQ(a.mask, MaskKind::Causal);
  EXPECT_EQ(a.gate, GateKind::None);
  EXPECT_FALSE(a.tree);
  const auto &r = std::get<LinearAttentionLayer>(model->layers[1]);
  EXPECT_EQ(r.numVHeads, 2);
  EXPECT_EQ(r.vDim, 16);
  EXPECT_EQ(r.chunkSize, 64);
  EXPECT_EQ(r.outputGate, OutputGate::None);

  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  using Args = std::vector<std::string>;
  std::vector<std::pair<std::string, Args>> expected = {
      {"a", Args{"q", "k", "v"}}, {"r", Args{"q", "k", "v", "S_init"}}};
  EXPECT_EQ(entrySignatures(*module), expected);
}

TEST(Frontend, EveryRuleAndMaskBuildsVerifiedIR) {
  for (const char *rule :
       {"linear", "decay", "gla", "delta", "gated_delta", "kda"})
    for (const char *mask :
         {R"("none")", R"("causal")", R"({"sliding_window": 32})",
          R"({"chunked": 16})"}) {
      std::string json = std::string(R"({"model": "m", "dtype": "bf16",
        "layers": [{"name": "a", "type": "attention", "num_heads": 8,
          "num_kv_heads": 1, "head_dim": 64, "value_dim": 48, "mask": )") +
                         mask + R"(, "gate": "headwise", "softcap": 50,
          "scale": 0.1, "tree": true,
          "sparsity": {"method": "top_k", "block_size": 32, "top_k": 4}},
        {"name": "r", "type": "linear_attention", "rule": ")" +
                         rule + R"(", "num_k_heads": 2, "num_v_heads": 4,
          "k_dim": 32, "v_dim": 16, "chunk_size": 16,
          "output_gate": "rmsnorm_silu"}],
        "speculative": {"max_tree_nodes": 8}})";
      llvm::Expected<ModelDescription> model = parseModelDescription(json);
      ASSERT_TRUE(static_cast<bool>(model))
          << llvm::toString(model.takeError());
      MLIRContext context;
      OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
      EXPECT_TRUE(succeeded(verify(*module))) << rule << " " << mask;
    }
}

TEST(Frontend, KdaTakesADecayPerKeyFeatureAndBeta) {
  // Kimi Delta Attention: g per step, value head and key feature, as gla's;
  // beta per step and value head, as the delta rules'.
  const char *json = R"({"model": "m", "layers": [{"name": "kda",
    "type": "linear_attention", "rule": "kda", "num_k_heads": 2,
    "num_v_heads": 4, "k_dim": 24, "v_dim": 40, "tree": true,
    "output_gate": "rmsnorm_sigmoid", "gate_eps": 1e-5}]})";
  llvm::Expected<ModelDescription> model = parseModelDescription(json);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  auto entry = module->lookupSymbol<func::FuncOp>("kda");
  ASSERT_TRUE(entry);
  using Args = std::vector<std::string>;
  EXPECT_EQ(entrySignatures(*module).front(),
            (std::pair<std::string, Args>{
                "kda", Args{"q", "k", "v", "g", "beta", "S_init", "z", "w"}}));
  auto g = cast<RankedTensorType>(entry.getArgumentTypes()[3]);
  auto beta = cast<RankedTensorType>(entry.getArgumentTypes()[4]);
  EXPECT_EQ(g.getShape(), (ArrayRef<int64_t>{ShapedType::kDynamic, 4,
                                             ShapedType::kDynamic, 24}));
  EXPECT_EQ(beta.getShape(),
            (ArrayRef<int64_t>{ShapedType::kDynamic, 4, ShapedType::kDynamic}));
}

TEST(Frontend, NamedVariantsAddTheirInputsInSpecOrder) {
  // SPEC §7: extra inputs come after every §4 input of the entry and of its
  // .tree entry, in the order rel_bias, doc_ids, prefix_len.
  const char *json = R"({"model": "m", "layers": [{"name": "a",
    "type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
    "gate": "elementwise", "score_mod": {"relative_bias": 3},
    "mask_mod": "document", "tree": true,
    "sparsity": {"method": "top_k", "block_size": 8, "top_k": 2}},
   {"name": "p", "type": "attention", "num_heads": 2, "head_dim": 8,
    "mask": "none", "score_mod": "alibi", "mask_mod": "prefix_lm"}]})";
  llvm::Expected<ModelDescription> model = parseModelDescription(json);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  const auto &a = std::get<AttentionLayer>(model->layers[0]);
  EXPECT_EQ(a.scoreMod, ScoreMod::RelativeBias);
  EXPECT_EQ(a.relativeBiasRadius, 3);
  EXPECT_EQ(a.maskMod, MaskMod::Document);
  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  using Args = std::vector<std::string>;
  std::vector<std::pair<std::string, Args>> expected = {
      {"a", Args{"q", "k", "v", "gate", "kmeta", "rel_bias", "doc_ids"}},
      {"a.meta", Args{"k"}},
      {"a.tree", Args{"q", "k", "v", "parents", "gate", "rel_bias", "doc_ids"}},
      {"a.compact", Args{"k", "v", "path", "length"}},
      {"p", Args{"q", "k", "v", "prefix_len"}}};
  EXPECT_EQ(entrySignatures(*module), expected);
  // The variants are regions of the attention ops, never of the selection.
  int regions = 0;
  module->walk([&](Operation *op) {
    if (auto attention = dyn_cast<AttentionOpInterface>(op))
      regions += (attention.getScoreModifier() != nullptr) +
                 (attention.getMaskModifier() != nullptr);
    if (isa<SelectTopKOp>(op)) {
      EXPECT_EQ(op->getNumRegions(), 0u);
    }
  });
  EXPECT_EQ(regions, 2 + 2 + 2); // a, a.tree, p
}

TEST(Frontend, LinearTreeEntryTakesParentsBeforeTheState) {
  // SPEC §10: <linear layer>.tree(q, k, v, (g), (beta), parents, S_init,
  // (z, w)) -> o, an attn.tree_recurrence of max_tree_nodes nodes.
  const char *json = R"({"model": "m", "layers": [{"name": "l",
    "type": "linear_attention", "rule": "gated_delta", "num_k_heads": 2,
    "num_v_heads": 4, "k_dim": 16, "output_gate": "rmsnorm_silu",
    "tree": true}], "speculative": {"max_tree_nodes": 100}})";
  llvm::Expected<ModelDescription> model = parseModelDescription(json);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  using Args = std::vector<std::string>;
  std::vector<std::pair<std::string, Args>> expected = {
      {"l", Args{"q", "k", "v", "g", "beta", "S_init", "z", "w"}},
      {"l.tree",
       Args{"q", "k", "v", "g", "beta", "parents", "S_init", "z", "w"}},
      {"l.commit",
       Args{"q", "k", "v", "g", "beta", "path", "length", "S_init"}},
      {"verify.accept", Args{"tokens", "target", "parents"}}};
  EXPECT_EQ(entrySignatures(*module), expected);
  int trees = 0;
  module->walk([&](mlir::attn::TreeRecurrenceOp op) {
    EXPECT_EQ(op.getMaxNodes(), 100u);
    ++trees;
  });
  EXPECT_EQ(trees, 1);
}

TEST(Frontend, ReturnLseAddsASecondOutput) {
  // SPEC §9: "return_lse" adds lse [B, H, Lq] after o in the layer's entry
  // and its .tree entry (sparse or dense); other entries are unchanged.
  const char *json = R"({"model": "m", "layers": [{"name": "a",
    "type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
    "gate": "headwise", "tree": true, "return_lse": true},
   {"name": "s", "type": "attention", "num_heads": 2, "head_dim": 8,
    "return_lse": true,
    "sparsity": {"method": "top_k", "block_size": 8, "top_k": 2}},
   {"name": "p", "type": "attention", "num_heads": 2, "head_dim": 8}]})";
  llvm::Expected<ModelDescription> model = parseModelDescription(json);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  std::map<std::string, std::vector<std::string>> results;
  module->walk([&](func::FuncOp func) {
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      auto name = func.getResultAttrOfType<StringAttr>(i, "attn.name");
      results[func.getSymName().str()].push_back(name ? name.str() : "?");
    }
    if (func.getSymName() == "a") {
      auto lse = cast<RankedTensorType>(func.getResultTypes()[1]);
      EXPECT_EQ(lse.getRank(), 3);
      EXPECT_EQ(lse.getDimSize(1), 4);
      EXPECT_TRUE(lse.getElementType().isF32());
    }
  });
  using Names = std::vector<std::string>;
  EXPECT_EQ(results["a"], (Names{"o", "lse"}));
  EXPECT_EQ(results["a.tree"], (Names{"o", "lse"}));
  EXPECT_EQ(results["a.compact"], (Names{"k'", "v'"}));
  EXPECT_EQ(results["s"], (Names{"o", "lse"}));
  EXPECT_EQ(results["s.meta"], (Names{"kmeta"}));
  EXPECT_EQ(results["p"], (Names{"o"}));
}

TEST(Frontend, SinksFollowTheGateAndTheBlockMetadata) {
  // "sinks": true adds sinks [H] (f32) to the entries that attend, after the
  // gate and the block metadata and before a ragged batch's offsets and the
  // SPEC §7 extras; .meta, .compact and .append do not take it.
  const char *json = R"({"model": "m", "layers": [{"name": "a",
    "type": "attention", "num_heads": 4, "num_kv_heads": 2, "head_dim": 16,
    "gate": "headwise", "tree": true, "sinks": true, "mask_mod": "document"},
   {"name": "s", "type": "attention", "num_heads": 2, "head_dim": 8,
    "sinks": true,
    "sparsity": {"method": "top_k", "block_size": 8, "top_k": 2}},
   {"name": "r", "type": "attention", "num_heads": 2, "head_dim": 8,
    "gate": "elementwise", "sinks": true, "tree": true,
    "layout": {"ragged": true, "page_size": 16},
    "sparsity": {"method": "top_k", "block_size": 16, "top_k": 2}}]})";
  llvm::Expected<ModelDescription> model = parseModelDescription(json);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  std::map<std::string, std::vector<std::string>> inputs;
  module->walk([&](func::FuncOp func) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto name = func.getArgAttrOfType<StringAttr>(i, "attn.name");
      inputs[func.getSymName().str()].push_back(name ? name.str() : "?");
      if (name && name.getValue() == "sinks") {
        auto type = cast<RankedTensorType>(func.getArgument(i).getType());
        EXPECT_EQ(type.getShape(),
                  ArrayRef<int64_t>{func.getSymName()[0] == 'a' ? 4 : 2});
        EXPECT_TRUE(type.getElementType().isF32());
      }
    }
  });
  using Names = std::vector<std::string>;
  EXPECT_EQ(inputs["a"], (Names{"q", "k", "v", "gate", "sinks", "doc_ids"}));
  EXPECT_EQ(inputs["a.tree"],
            (Names{"q", "k", "v", "parents", "gate", "sinks", "doc_ids"}));
  EXPECT_EQ(inputs["a.compact"], (Names{"k", "v", "path", "length"}));
  EXPECT_EQ(inputs["s"], (Names{"q", "k", "v", "kmeta", "sinks"}));
  EXPECT_EQ(inputs["s.meta"], (Names{"k"}));
  EXPECT_EQ(inputs["r"],
            (Names{"q", "k_cache", "v_cache", "page_table", "seq_lens", "gate",
                   "kmeta_pages", "sinks", "cu_seqlens_q"}));
  EXPECT_EQ(inputs["r.tree"], (Names{"q", "k_cache", "v_cache", "page_table",
                                     "seq_lens", "parents", "gate", "sinks"}));
  EXPECT_EQ(inputs["r.append"],
            (Names{"k_new", "v_new", "slots", "k_cache", "v_cache"}));
}

TEST(Frontend, LatentCachesReplaceKeysAndValues) {
  // "latent_kv": true: one cache `kv` (`kv_cache`) where other layers take
  // k and v, in every entry; the values are its first value_dim features,
  // a tensor.extract_slice of it.
  const char *json = R"({"model": "m", "layers": [{"name": "a",
    "type": "attention", "num_heads": 16, "num_kv_heads": 1,
    "head_dim": 576, "value_dim": 512, "latent_kv": true, "tree": true,
    "sparsity": {"method": "top_k", "block_size": 64, "top_k": 8}},
   {"name": "r", "type": "attention", "num_heads": 16, "num_kv_heads": 1,
    "head_dim": 576, "value_dim": 512, "latent_kv": true, "tree": true,
    "gate": "elementwise", "layout": {"ragged": true, "page_size": 64}},
   {"name": "p", "type": "attention", "num_heads": 4, "num_kv_heads": 1,
    "head_dim": 24, "value_dim": 16, "latent_kv": true,
    "layout": {"ragged": true}}]})";
  llvm::Expected<ModelDescription> model = parseModelDescription(json);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  std::map<std::string, std::vector<std::string>> inputs, results;
  module->walk([&](func::FuncOp func) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto name = func.getArgAttrOfType<StringAttr>(i, "attn.name");
      inputs[func.getSymName().str()].push_back(name ? name.str() : "?");
    }
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      auto name = func.getResultAttrOfType<StringAttr>(i, "attn.name");
      results[func.getSymName().str()].push_back(name ? name.str() : "?");
    }
  });
  using Names = std::vector<std::string>;
  EXPECT_EQ(inputs["a"], (Names{"q", "kv", "kmeta"}));
  EXPECT_EQ(inputs["a.meta"], (Names{"kv"}));
  EXPECT_EQ(inputs["a.tree"], (Names{"q", "kv", "parents"}));
  EXPECT_EQ(inputs["a.compact"], (Names{"kv", "path", "length"}));
  EXPECT_EQ(results["a.compact"], (Names{"kv'"}));
  EXPECT_EQ(inputs["r"], (Names{"q", "kv_cache", "page_table", "seq_lens",
                                "gate", "cu_seqlens_q"}));
  EXPECT_EQ(inputs["r.tree"], (Names{"q", "kv_cache", "page_table", "seq_lens",
                                     "parents", "gate"}));
  EXPECT_EQ(inputs["r.append"], (Names{"kv_new", "slots", "kv_cache"}));
  EXPECT_EQ(inputs["p"], (Names{"q", "kv", "cu_seqlens_q", "cu_seqlens_k"}));
  // Every attention reads its values through a view of the cache's leading
  // features.
  int views = 0;
  module->walk([&](tensor::ExtractSliceOp slice) {
    ++views;
    EXPECT_EQ(slice.getResultType().getShape().back(),
              slice.getSourceType().getShape().back() == 576 ? 512 : 16);
  });
  EXPECT_EQ(views, 5);
}

struct BadDescription {
  const char *json;
  const char *message;
};

class FrontendErrors : public ::testing::TestWithParam<BadDescription> {};

TEST(Frontend, VariantFuncTextIsBounded) {
  std::string json = R"({"model": "m", "layers": [{"name": "a", )"
                     R"("type": "attention", "num_heads": 8, "head_dim": 64, )"
                     R"("mask_mod": {"func": ")" +
                     std::string(70000, ' ') + "\"}}]}";
  EXPECT_EQ(parseError(json), "$.layers[0].mask_mod.func: expected at most "
                              "65536 bytes of attn IR (attn's limit), got "
                              "70000");
}

TEST_P(FrontendErrors, NameThePathAndTheExpectation) {
  EXPECT_EQ(parseError(GetParam().json), GetParam().message);
}

#define LAYER(extra)                                                           \
  R"({"model": "m", "layers": [{"name": "a", "type": "attention", )"           \
  R"("num_heads": 8, "num_kv_heads": 2, "head_dim": 64)" extra "}]}"

INSTANTIATE_TEST_SUITE_P(
    Cases, FrontendErrors,
    ::testing::Values(
        BadDescription{R"({"model": "m", "layers": [)",
                       "$: not valid JSON: [1:26, byte=26]: Unexpected EOF"},
        BadDescription{R"([])", "$: expected an object, got []"},
        BadDescription{R"({"model": "m", "layer": []})",
                       "$: unknown key 'layer'; expected one of: model, "
                       "dtype, layers, speculative"},
        BadDescription{R"({"model": "m"})", "$: missing required key 'layers'"},
        BadDescription{R"({"model": "m", "layers": []})",
                       "$.layers: expected a non-empty array of layers, got "
                       "[]"},
        BadDescription{R"({"model": "m", "dtype": "f64", "layers": [{}]})",
                       "$.dtype: expected \"f32\", \"f16\" or \"bf16\", got "
                       "\"f64\""},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "a", "type": "mlp"}]})",
            "$.layers[0].type: expected \"attention\" or "
            "\"linear_attention\", got \"mlp\""},
        BadDescription{
            LAYER(R"(, "num_head": 8)"),
            "$.layers[0]: unknown key 'num_head'; expected one "
            "of: name, type, num_heads, num_kv_heads, head_dim, "
            "value_dim, mask, gate, softcap, scale, sparsity, "
            "tree, score_mod, mask_mod, return_lse, sinks, latent_kv, "
            "layout"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "a", "type": "attention", "num_heads": -8, "head_dim": 64}]})",
            "$.layers[0].num_heads: expected a positive integer, got -8"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "a", "type": "attention", "num_heads": 6, "num_kv_heads": 4, "head_dim": 64}]})",
            "$.layers[0]: num_heads (6) must be a multiple of num_kv_heads "
            "(4)"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "a", "type": "attention", "head_dim": 64}]})",
            "$.layers[0]: missing required key 'num_heads'"},
        BadDescription{LAYER(R"(, "mask": "diagonal")"),
                       "$.layers[0].mask: expected \"none\", \"causal\", "
                       "{\"sliding_window\": W} or {\"chunked\": C}, got "
                       "\"diagonal\""},
        BadDescription{LAYER(R"(, "mask": {"chunked": 0})"),
                       "$.layers[0].mask.chunked: expected a positive "
                       "integer, got 0"},
        BadDescription{
            LAYER(R"(, "mask": {"chunked": 8, "sliding_window": 4})"),
            "$.layers[0].mask: expected \"none\", \"causal\", "
            "{\"sliding_window\": W} or {\"chunked\": C}, got "
            "{\"chunked\":8,\"sliding_window\":4}"},
        BadDescription{LAYER(R"(, "mask": {"sliding_window": 0})"),
                       "$.layers[0].mask.sliding_window: expected a positive "
                       "integer, got 0"},
        BadDescription{LAYER(R"(, "mask": {"window": 8})"),
                       "$.layers[0].mask: unknown key 'window'; expected one "
                       "of: sliding_window, chunked"},
        BadDescription{LAYER(R"(, "gate": "sigmoid")"),
                       "$.layers[0].gate: expected \"none\", \"elementwise\" "
                       "or \"headwise\", got \"sigmoid\""},
        BadDescription{LAYER(R"(, "score_mod": "t5")"),
                       "$.layers[0].score_mod: expected \"alibi\", "
                       "{\"relative_bias\": R} or {\"func\": \"<attn IR>\"}, "
                       "got \"t5\""},
        BadDescription{LAYER(R"(, "score_mod": {"relative_bias": -1})"),
                       "$.layers[0].score_mod.relative_bias: expected an "
                       "integer >= 0, got -1"},
        BadDescription{LAYER(R"(, "score_mod": {"relative_bias": 70000})"),
                       "$.layers[0].score_mod.relative_bias: expected an "
                       "integer <= 65536 (attn's limit), got 70000"},
        BadDescription{LAYER(R"(, "score_mod": {"relative_bias": 2.5})"),
                       "$.layers[0].score_mod.relative_bias: expected an "
                       "integer >= 0, got 2.5"},
        BadDescription{LAYER(R"(, "score_mod": {"bias": 4})"),
                       "$.layers[0].score_mod: unknown key 'bias'; expected "
                       "one of: relative_bias, func"},
        BadDescription{LAYER(R"(, "score_mod": {"func": 3})"),
                       "$.layers[0].score_mod.func: expected a string, got 3"},
        BadDescription{LAYER(R"(, "score_mod": {"func": "", "inputs": []})"),
                       "$.layers[0].score_mod: unknown key 'inputs'; "
                       "expected one of: func"},
        BadDescription{LAYER(R"(, "mask_mod": {"fn": ""})"),
                       "$.layers[0].mask_mod: unknown key 'fn'; expected "
                       "one of: func"},
        BadDescription{LAYER(R"(, "score_mod": 3)"),
                       "$.layers[0].score_mod: expected \"alibi\", "
                       "{\"relative_bias\": R} or {\"func\": \"<attn IR>\"}, "
                       "got 3"},
        BadDescription{LAYER(R"(, "mask_mod": "documents")"),
                       "$.layers[0].mask_mod: expected \"none\", "
                       "\"document\", \"prefix_lm\" or {\"func\": \"<attn "
                       "IR>\"}, got \"documents\""},
        BadDescription{LAYER(R"(, "softcap": -1)"),
                       "$.layers[0].softcap: expected a number >= 0 (0 "
                       "disables it), got -1"},
        BadDescription{LAYER(R"(, "scale": "auto")"),
                       "$.layers[0].scale: expected a number, got \"auto\""},
        BadDescription{LAYER(R"(, "tree": 1)"),
                       "$.layers[0].tree: expected true or false, got 1"},
        BadDescription{LAYER(R"(, "sinks": 1)"),
                       "$.layers[0].sinks: expected true or false, got 1"},
        BadDescription{LAYER(R"(, "return_lse": "yes")"),
                       "$.layers[0].return_lse: expected true or false, got "
                       "\"yes\""},
        BadDescription{
            LAYER(
                R"(, "sparsity": {"method": "top_p", "block_size": 16, "top_p": 1.5})"),
            "$.layers[0].sparsity.top_p: expected a number in (0, 1], got "
            "1.5"},
        BadDescription{
            LAYER(
                R"(, "sparsity": {"method": "top_k", "block_size": 16, "top_k": 4, "top_p": 0.9})"),
            "$.layers[0].sparsity.top_p: only used by method \"top_p\""},
        BadDescription{
            LAYER(R"(, "sparsity": {"method": "top_k", "block_size": 16})"),
            "$.layers[0].sparsity: missing required key 'top_k'"},
        BadDescription{
            LAYER(
                R"(, "sparsity": {"method": "top_p", "block_size": 16, "top_p": 0.9, "min_tokens": 64, "max_tokens": 8})"),
            "$.layers[0].sparsity: min_tokens (64) must not exceed "
            "max_tokens (8)"},
        BadDescription{
            LAYER(
                R"(, "sparsity": {"method": "top_k", "block_size": 16, "top_k": 2, "sink_blocks": 2, "local_blocks": 1})"),
            "$.layers[0].sparsity: sink_blocks + local_blocks (2 + 1) must "
            "not exceed top_k (2)"},
        BadDescription{
            LAYER(
                R"(, "sparsity": {"method": "top_p", "block_size": 16, "top_p": 0.9, "estimator": "int8"})"),
            "$.layers[0].sparsity.estimator: expected \"exact\" or \"int4\", "
            "got \"int8\""},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "a", "type": "attention", "num_heads": 1, "head_dim": 8}, {"name": "a", "type": "attention", "num_heads": 1, "head_dim": 8}]})",
            "$.layers[1].name: \"a\" is already the name of $.layers[0]"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "a.tree", "type": "attention", "num_heads": 1, "head_dim": 8}]})",
            "$.layers[0].name: expected an identifier (letters, digits, '_' "
            "or '-', not starting with a digit), got \"a.tree\""},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "r", "type": "linear_attention", "rule": "mamba", "num_k_heads": 2, "k_dim": 8}]})",
            "$.layers[0].rule: expected \"linear\", \"decay\", \"gla\", "
            "\"delta\", \"gated_delta\" or \"kda\", got \"mamba\""},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "r", "type": "linear_attention", "rule": "delta", "num_k_heads": 4, "num_v_heads": 6, "k_dim": 8}]})",
            "$.layers[0]: num_v_heads (6) must be a multiple of num_k_heads "
            "(4)"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "r", "type": "linear_attention", "rule": "delta", "num_k_heads": 4, "k_dim": 8, "chunk_size": 48}]})",
            "$.layers[0].chunk_size: expected 16, 32, 64 or 128, got 48"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "r", "type": "linear_attention", "rule": "delta", "num_k_heads": 4, "k_dim": 8, "output_gate": "swish"}]})",
            "$.layers[0].output_gate: expected \"none\", \"rmsnorm_silu\", "
            "\"rmsnorm_sigmoid\", \"silu\" or \"sigmoid\", got \"swish\""},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "r", "type": "linear_attention", "rule": "delta", "num_k_heads": 4, "k_dim": 8, "output_gate": "silu", "gate_groups": 2}]})",
            "$.layers[0].gate_groups: needs an \"output_gate\" that "
            "normalizes (\"rmsnorm_silu\" or \"rmsnorm_sigmoid\"), whose "
            "norm this key shapes"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "r", "type": "linear_attention", "rule": "delta", "num_k_heads": 4, "k_dim": 8, "skip": true}]})",
            "$.layers[0].skip: needs an \"output_gate\" (Mamba2's skip D x "
            "is added to o before the gate)"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "a", "type": "attention", "num_heads": 1, "head_dim": 8}], "speculative": {"max_tree_nodes": 0}})",
            "$.speculative.max_tree_nodes: expected a positive integer, got "
            "0"},
        // The bounds of dialects/Attn/Limits.h (docs/limits.md).
        BadDescription{
            R"({"model": "m", "layers": [{"name": "a", "type": "attention", "num_heads": 8, "head_dim": 1048576}]})",
            "$.layers[0].head_dim: expected an integer <= 576 (attn's limit), "
            "got 1048576"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "a", "type": "attention", "num_heads": 2147483648, "head_dim": 64}]})",
            "$.layers[0].num_heads: expected an integer <= 1024 (attn's "
            "limit), got 2147483648"},
        BadDescription{LAYER(R"(, "value_dim": 577)"),
                       "$.layers[0].value_dim: expected an integer <= 576 "
                       "(attn's limit), got 577"},
        // A latent cache's values are its keys' first value_dim features.
        BadDescription{LAYER(R"(, "value_dim": 65, "latent_kv": true)"),
                       "$.layers[0].value_dim: expected at most head_dim (64) "
                       "with \"latent_kv\" (the values are the keys' first "
                       "value_dim features), got 65"},
        BadDescription{LAYER(R"(, "latent_kv": 1)"),
                       "$.layers[0].latent_kv: expected true or false, got 1"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "r", "type": "linear_attention", "rule": "delta", "num_k_heads": 4, "k_dim": 8, "v_dim": 100000}]})",
            "$.layers[0].v_dim: expected an integer <= 576 (attn's limit), "
            "got 100000"},
        BadDescription{LAYER(R"(, "mask": {"sliding_window": 4294967296})"),
                       "$.layers[0].mask.sliding_window: expected an integer "
                       "<= 2147483647 (attn's limit), got 4294967296"},
        // Past their bounds, sink_blocks + local_blocks once wrapped
        // around its check against top_k.
        BadDescription{
            LAYER(
                R"(, "sparsity": {"method": "top_k", "block_size": 16, "top_k": 4, "sink_blocks": 9223372036854775807, "local_blocks": 2})"),
            "$.layers[0].sparsity.sink_blocks: expected an integer <= "
            "1048576 (attn's limit), got 9223372036854775807"},
        BadDescription{
            LAYER(
                R"(, "sparsity": {"method": "top_k", "block_size": 16, "top_k": 4611686018427387904})"),
            "$.layers[0].sparsity.top_k: expected an integer <= 1048576 "
            "(attn's limit), got 4611686018427387904"},
        BadDescription{
            LAYER(
                R"(, "sparsity": {"method": "top_k", "block_size": 65536, "top_k": 4})"),
            "$.layers[0].sparsity.block_size: expected an integer <= 4096 "
            "(attn's limit), got 65536"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "a", "type": "attention", "num_heads": 1, "head_dim": 8}], "speculative": {"max_tree_nodes": 1000000}})",
            "$.speculative.max_tree_nodes: expected an integer <= 4096 "
            "(attn's limit), got 1000000"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "l", "type": "linear_attention", "rule": "delta", "num_k_heads": 1, "k_dim": 8, "tree": true}], "speculative": {"max_tree_nodes": 300}})",
            "$.speculative.max_tree_nodes: expected at most 256 with a linear "
            "layer's \"tree\", got 300"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "l", "type": "linear_attention", "rule": "delta", "num_k_heads": 1, "k_dim": 8, "tree": "yes"}]})",
            "$.layers[0].tree: expected true or false, got \"yes\""},
        // SPEC §8 layouts.
        BadDescription{
            LAYER(
                R"(, "sparsity": {"method": "top_k", "block_size": 16, "top_k": 4}, "layout": {"ragged": true})"),
            "$.layers[0].layout: sparsity with a layout needs \"page_size\" "
            "(Quest's blocks are the cache's pages)"},
        BadDescription{LAYER(R"(, "layout": {"ragged": "yes"})"),
                       "$.layers[0].layout.ragged: expected true or false, "
                       "got \"yes\""},
        BadDescription{LAYER(R"(, "layout": {"page_size": 0})"),
                       "$.layers[0].layout.page_size: expected a positive "
                       "integer, got 0"},
        BadDescription{
            LAYER(
                R"(, "sparsity": {"method": "top_k", "block_size": 8, "top_k": 4}, "layout": {"page_size": 16})"),
            "$.layers[0].sparsity.block_size: over a paged cache the blocks "
            "are its pages: expected the page size 16, got 8"},
        BadDescription{
            LAYER(R"(, "sparsity": {"method": "top_k", "top_k": 4})"),
            "$.layers[0].sparsity: missing required key "
            "'block_size'"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "l", "type": "linear_attention", "rule": "delta", "num_k_heads": 1, "k_dim": 8, "layout": {"ragged": true, "page_size": 16}}]})",
            "$.layers[0].layout.page_size: pages hold keys and values of "
            "softmax attention layers; a linear layer keeps a state pool "
            "(\"ragged\": true)"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "l", "type": "linear_attention", "rule": "delta", "num_k_heads": 1, "k_dim": 8, "layout": {"packed": true}}]})",
            "$.layers[0].layout: unknown key 'packed'; expected one of: "
            "ragged, page_size"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "l", "type": "linear_attention", "rule": "delta", "num_k_heads": 1, "k_dim": 8, "layout": {"ragged": 1}}]})",
            "$.layers[0].layout.ragged: expected true or false, got 1"},
        BadDescription{
            R"({"model": "m", "layers": [{"name": "l", "type": "linear_attention", "rule": "delta", "num_k_heads": 1, "k_dim": 8, "layout": true}]})",
            "$.layers[0].layout: expected an object, got true"}));

TEST(Frontend, PagedAttentionEntryTakesTheCacheAndItsTable) {
  // SPEC §8: q, k_cache, v_cache, page_table, seq_lens (+ gate) (+ extras)
  // -> o, one attn.sdpa reading the cache through the table; .append
  // updates both caches in place and returns nothing else.
  const char *json = R"({"model": "m", "layers": [{"name": "a",
    "type": "attention", "num_heads": 8, "num_kv_heads": 2, "head_dim": 64,
    "gate": "headwise", "score_mod": {"relative_bias": 4},
    "layout": {"page_size": 16}}]})";
  llvm::Expected<ModelDescription> model = parseModelDescription(json);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  using Args = std::vector<std::string>;
  std::vector<std::pair<std::string, Args>> expected = {
      {"a", Args{"q", "k_cache", "v_cache", "page_table", "seq_lens", "gate",
                 "rel_bias"}},
      {"a.append", Args{"k_new", "v_new", "slots", "k_cache", "v_cache"}}};
  EXPECT_EQ(entrySignatures(*module), expected);
  int paged = 0;
  module->walk([&](mlir::attn::SdpaOp op) {
    EXPECT_TRUE(op.getPageTable());
    EXPECT_EQ(op.getKey().getType().getDimSize(1), 16);
    ++paged;
  });
  EXPECT_EQ(paged, 1);
  module->walk([&](func::FuncOp func) {
    if (func.getSymName() != "a.append")
      return;
    EXPECT_TRUE(func.getArgAttr(3, "attn.in_place"));
    EXPECT_TRUE(func.getArgAttr(4, "attn.in_place"));
    EXPECT_EQ(func.getNumResults(), 2u); // the caches' updates, no outputs
  });
}

TEST(Frontend, RaggedAttentionEntriesTakeOffsetsAfterTheGate) {
  // SPEC §8: the §4 list, then cu_seqlens_q (+ cu_seqlens_k unless paged),
  // then the §7 extras; rows packed [T, H, F].
  using Args = std::vector<std::string>;
  struct Case {
    const char *layout;
    std::vector<std::pair<std::string, Args>> entries;
  };
  const Case cases[] = {
      {R"({"ragged": true})",
       {{"a", Args{"q", "k", "v", "gate", "cu_seqlens_q", "cu_seqlens_k",
                   "doc_ids"}}}},
      {R"({"ragged": true, "page_size": 16})",
       {{"a", Args{"q", "k_cache", "v_cache", "page_table", "seq_lens", "gate",
                   "cu_seqlens_q", "doc_ids"}},
        {"a.append", Args{"k_new", "v_new", "slots", "k_cache", "v_cache"}}}},
  };
  for (const Case &c : cases) {
    std::string json = std::string(R"({"model": "m", "layers": [{"name": "a",
      "type": "attention", "num_heads": 8, "num_kv_heads": 2, "head_dim": 64,
      "gate": "elementwise", "mask_mod": "document", "return_lse": true,
      "layout": )") + c.layout +
                       "}]}";
    llvm::Expected<ModelDescription> model = parseModelDescription(json);
    ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
    MLIRContext context;
    OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
    ASSERT_TRUE(succeeded(verify(*module))) << c.layout;
    EXPECT_EQ(entrySignatures(*module), c.entries) << c.layout;
    auto func = *module->getOps<func::FuncOp>().begin();
    // o [T, H, Dv] and lse [T, H].
    ASSERT_EQ(func.getNumResults(), 2u);
    EXPECT_EQ(cast<RankedTensorType>(func.getResultTypes()[0]).getShape(),
              (ArrayRef<int64_t>{ShapedType::kDynamic, 8, 64}));
    EXPECT_EQ(cast<RankedTensorType>(func.getResultTypes()[1]).getRank(), 2);
  }
}

TEST(Frontend, RaggedTreeOverPackedKeysTakesTheKeysOffsets) {
  // A tree of T nodes per sequence, q [B, H, T, D]; keys packed [Tk, Hkv,
  // D] with cu_seqlens_k after the gate and sinks, before the extras; a
  // .compact over the same packed keys.
  const char *json = R"({"model": "m", "layers": [{"name": "a",
    "type": "attention", "num_heads": 8, "num_kv_heads": 2, "head_dim": 64,
    "gate": "headwise", "sinks": true, "mask_mod": "document", "tree": true,
    "layout": {"ragged": true}}]})";
  llvm::Expected<ModelDescription> model = parseModelDescription(json);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  using Args = std::vector<std::string>;
  std::vector<std::pair<std::string, Args>> expected = {
      {"a", Args{"q", "k", "v", "gate", "sinks", "cu_seqlens_q", "cu_seqlens_k",
                 "doc_ids"}},
      {"a.tree", Args{"q", "k", "v", "parents", "gate", "sinks", "cu_seqlens_k",
                      "doc_ids"}},
      {"a.compact", Args{"k", "v", "path", "length", "cu_seqlens_k"}}};
  EXPECT_EQ(entrySignatures(*module), expected);
  int trees = 0;
  module->walk([&](mlir::attn::TreeSdpaOp op) {
    EXPECT_TRUE(op.getCuSeqlensK());
    EXPECT_EQ(op.getQuery().getType().getRank(), 4);
    EXPECT_EQ(op.getKey().getType().getRank(), 3);
    ++trees;
  });
  EXPECT_EQ(trees, 1);
}

TEST(Frontend, RaggedLinearEntryTakesAPoolInPlace) {
  // SPEC §8: <linear layer>(q, k, v, (g), (beta), states, state_idx,
  // (z, w), cu_seqlens) -> o, the pool updated in place.
  const char *json = R"({"model": "m", "layers": [{"name": "l",
    "type": "linear_attention", "rule": "gated_delta", "num_k_heads": 2,
    "num_v_heads": 4, "k_dim": 16, "output_gate": "rmsnorm_silu",
    "layout": {"ragged": true}}]})";
  llvm::Expected<ModelDescription> model = parseModelDescription(json);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  using Args = std::vector<std::string>;
  std::vector<std::pair<std::string, Args>> expected = {
      {"l", Args{"q", "k", "v", "g", "beta", "states", "state_idx", "z", "w",
                 "cu_seqlens"}}};
  EXPECT_EQ(entrySignatures(*module), expected);
  auto func = *module->getOps<func::FuncOp>().begin();
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    EXPECT_EQ(static_cast<bool>(func.getArgAttr(i, "attn.in_place")), i == 5)
        << i;
  // o, then the pool's update.
  ASSERT_EQ(func.getNumResults(), 2u);
  EXPECT_EQ(cast<RankedTensorType>(func.getResultTypes()[0]).getRank(), 3);
  EXPECT_EQ(func.getResultTypes()[1], func.getArgumentTypes()[5]);
}

// 50,000 nested brackets once overflowed the parser's stack.
TEST(Frontend, NestingIsBounded) {
  std::string deep = std::string(50000, '[') + std::string(50000, ']');
  EXPECT_EQ(parseError(deep),
            "$: arrays and objects nest deeper than 64 (at byte 64)");
  // Brackets inside strings do not count.
  std::string quoted = R"({"model": ")" + std::string(100, '[') +
                       R"(", "layers": [{"name": "a", "type": "attention", )"
                       R"("num_heads": 1, "head_dim": 8}]})";
  llvm::Expected<ModelDescription> model = parseModelDescription(quoted);
  EXPECT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
}

TEST(Frontend, LayerCountIsBounded) {
  std::string json = R"({"model": "m", "layers": [)";
  for (int i = 0; i < 4097; ++i)
    json += std::string(i ? "," : "") + R"({"name": "l)" + std::to_string(i) +
            R"(", "type": "attention", "num_heads": 1, "head_dim": 8})";
  json += "]}";
  EXPECT_EQ(parseError(json),
            "$.layers: 4097 layers; attn compiles at most 4096");
}

} // namespace

//===----------------------------------------------------------------------===//
// Hugging Face configs
//===----------------------------------------------------------------------===//

namespace {

std::string configError(llvm::StringRef json) {
  llvm::Expected<ModelDescription> model = parseModelInput(json);
  if (model)
    return "";
  return llvm::toString(model.takeError());
}

TEST(HuggingFaceConfig, Qwen3NextExample) {
  llvm::Expected<ModelDescription> model =
      parseModelInput(readExample("qwen3-next/config.json"));
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  EXPECT_EQ(model->model, "qwen3_next");
  // 48 layers, every 4th full attention: layer 0 is linear attention.
  ASSERT_EQ(model->layers.size(), 2u);
  const auto &linear = std::get<LinearAttentionLayer>(model->layers[0]);
  EXPECT_EQ(linear.name, "linear_attention");
  EXPECT_EQ(linear.rule, Rule::GatedDelta);
  EXPECT_EQ(linear.numKHeads, 16);
  EXPECT_EQ(linear.numVHeads, 32);
  EXPECT_EQ(linear.kDim, 128);
  EXPECT_EQ(linear.vDim, 128);
  EXPECT_TRUE(linear.qkL2Norm);
  EXPECT_EQ(linear.outputGate, OutputGate::RmsNormSilu);
  EXPECT_EQ(linear.gateEps, 1e-6);
  const auto &full = std::get<AttentionLayer>(model->layers[1]);
  EXPECT_EQ(full.name, "full_attention");
  EXPECT_EQ(full.numHeads, 16);
  EXPECT_EQ(full.numKvHeads, 2);
  EXPECT_EQ(full.headDim, 256);
  EXPECT_EQ(full.valueDim, 256);
  EXPECT_EQ(full.mask, MaskKind::Causal);
  EXPECT_EQ(full.gate, GateKind::Elementwise);

  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  auto entries = entrySignatures(*module);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].first, "linear_attention");
  EXPECT_EQ(entries[0].second,
            (std::vector<std::string>{"q", "k", "v", "g", "beta", "S_init", "z",
                                      "w"}));
  EXPECT_EQ(entries[1].first, "full_attention");
  EXPECT_EQ(entries[1].second,
            (std::vector<std::string>{"q", "k", "v", "gate"}));
}

const char *kQwenHeads = R"("num_attention_heads": 8, "num_key_value_heads": 2,
  "head_dim": 64, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
  "linear_key_head_dim": 32, "linear_value_head_dim": 48)";

TEST(HuggingFaceConfig, LayerTypesListOnlyTheKindsPresent) {
  std::string json = std::string(R"({"model_type": "qwen3_next",
    "layer_types": ["full_attention", "full_attention"], )") +
                     kQwenHeads + "}";
  llvm::Expected<ModelDescription> model = parseModelInput(json);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  ASSERT_EQ(model->layers.size(), 1u);
  EXPECT_EQ(std::get<AttentionLayer>(model->layers[0]).name, "full_attention");
}

TEST(HuggingFaceConfig, HeadDimDefaultsToHiddenSizeOverHeads) {
  llvm::Expected<ModelDescription> model = parseModelInput(
      R"({"model_type": "qwen3_next", "layer_types": ["full_attention"],
          "num_attention_heads": 4, "hidden_size": 512})");
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  const auto &full = std::get<AttentionLayer>(model->layers[0]);
  EXPECT_EQ(full.headDim, 128);
  EXPECT_EQ(full.numKvHeads, 4);
}

// Python's json writes float('inf') and float('nan') as bare words, which
// saved configs carry: a config reads them as null (a key attn reads then
// takes its default; inside strings nothing changes), a model description
// refuses them.
TEST(HuggingFaceConfig, PythonInfinityAndNaNReadAsNull) {
  llvm::Expected<ModelDescription> model = parseModelInput(
      R"({"model_type": "mistral", "architectures": ["NaN Infinity"],
          "sliding_window": Infinity, "time_step_limit": [0.0, -Infinity],
          "rope_theta": NaN, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 16})");
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  ASSERT_EQ(model->layers.size(), 1u);
  const auto &layer = std::get<AttentionLayer>(model->layers[0]);
  // An infinite window is none, as a null one is.
  EXPECT_EQ(layer.name, "full_attention");
  EXPECT_NE(configError(R"({"model": "m", "layers": [{"name": "a",
      "type": "attention", "num_heads": 2, "head_dim": 8, "scale": NaN}]})"),
            "");
}

TEST(HuggingFaceConfig, NemotronHPatternGivesTheKinds) {
  llvm::Expected<ModelDescription> model =
      parseModelInput(readExample("nemotron-h/config.json"));
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  ASSERT_EQ(model->layers.size(), 2u);
  const auto &mamba = std::get<LinearAttentionLayer>(model->layers[0]);
  EXPECT_EQ(mamba.name, "mamba");
  EXPECT_EQ(mamba.rule, Rule::Decay);
  EXPECT_EQ(mamba.numKHeads, 8);
  EXPECT_EQ(mamba.numVHeads, 128);
  EXPECT_EQ(mamba.kDim, 128);
  EXPECT_EQ(mamba.vDim, 64);
  EXPECT_EQ(mamba.scale, 1.0);
  EXPECT_FALSE(mamba.qkL2Norm);
  // Its mixer ends with the skip D x and the gated RMSNorm, gate first,
  // over n_groups groups (MambaRMSNormGated's group_size = intermediate /
  // n_groups), with layer_norm_epsilon.
  EXPECT_EQ(mamba.outputGate, OutputGate::RmsNormSilu);
  EXPECT_EQ(mamba.gateGroups, 8);
  EXPECT_FALSE(mamba.normBeforeGate);
  EXPECT_TRUE(mamba.skip);
  EXPECT_EQ(mamba.gateEps, 1e-5);
  const auto &full = std::get<AttentionLayer>(model->layers[1]);
  EXPECT_EQ(full.name, "full_attention");
  EXPECT_EQ(full.numHeads, 32);
  EXPECT_EQ(full.numKvHeads, 8);
  EXPECT_EQ(full.headDim, 128);
  EXPECT_EQ(full.mask, MaskKind::Causal);
}

// Granite 4.0-H, Bamba and Falcon-H1 name their Mamba2 mixers' keys
// mamba_n_heads, mamba_d_head ("auto": the mixer's width over its heads),
// mamba_n_groups and mamba_d_state, and their attention layers each their
// own way.
TEST(HuggingFaceConfig, MambaHybridsReadTheirKeys) {
  llvm::Expected<ModelDescription> granite = parseModelInput(
      R"({"model_type": "granitemoehybrid", "hidden_size": 1024,
          "num_attention_heads": 8, "num_key_value_heads": 2,
          "attention_multiplier": 0.015625, "mamba_n_heads": 32,
          "mamba_d_head": "auto", "mamba_d_state": 64,
          "layer_types": ["mamba", "attention", "mamba"]})");
  ASSERT_TRUE(static_cast<bool>(granite))
      << llvm::toString(granite.takeError());
  ASSERT_EQ(granite->layers.size(), 2u);
  const auto &mixer = std::get<LinearAttentionLayer>(granite->layers[0]);
  EXPECT_EQ(mixer.name, "mamba");
  EXPECT_EQ(mixer.numKHeads, 1); // mamba_n_groups' default
  EXPECT_EQ(mixer.numVHeads, 32);
  EXPECT_EQ(mixer.kDim, 64);
  EXPECT_EQ(mixer.vDim, 64); // 2 x 1024 / 32
  // Its mixer's norm: GraniteMoeHybridConfig's rms_norm_eps, 1e-6.
  EXPECT_EQ(mixer.gateEps, 1e-6);
  EXPECT_EQ(mixer.gateGroups, 1);
  EXPECT_TRUE(mixer.skip);
  const auto &attention = std::get<AttentionLayer>(granite->layers[1]);
  EXPECT_EQ(attention.name, "full_attention");
  EXPECT_EQ(attention.headDim, 128);
  EXPECT_EQ(attention.scale, 0.015625);

  llvm::Expected<ModelDescription> bamba = parseModelInput(
      R"({"model_type": "bamba", "num_hidden_layers": 4,
          "attn_layer_indices": [2], "mamba_d_head": 16})");
  ASSERT_TRUE(static_cast<bool>(bamba)) << llvm::toString(bamba.takeError());
  ASSERT_EQ(bamba->layers.size(), 2u);
  EXPECT_EQ(std::get<LinearAttentionLayer>(bamba->layers[0]).vDim, 16);
  EXPECT_EQ(std::get<AttentionLayer>(bamba->layers[1]).numKvHeads, 8);

  llvm::Expected<ModelDescription> falcon =
      parseModelInput(R"({"model_type": "falcon_h1", "mamba_n_heads": 16})");
  ASSERT_TRUE(static_cast<bool>(falcon)) << llvm::toString(falcon.takeError());
  ASSERT_EQ(falcon->layers.size(), 2u);
  // FalconH1Config's mamba_d_ssm of 1024 over 16 heads.
  EXPECT_EQ(std::get<LinearAttentionLayer>(falcon->layers[0]).vDim, 64);
  EXPECT_FALSE(std::get<AttentionLayer>(falcon->layers[1]).scale.has_value());
  // Without mamba_rms_norm (its default) the mixer gates y + D x by
  // silu(z) alone; with it, normalized first unless mamba_norm_before_gate
  // says otherwise.
  const auto &plain = std::get<LinearAttentionLayer>(falcon->layers[0]);
  EXPECT_EQ(plain.outputGate, OutputGate::Silu);
  EXPECT_TRUE(plain.skip);
  EXPECT_FALSE(plain.gateGroups.has_value());
  for (auto [json, before] :
       {std::pair{R"({"model_type": "falcon_h1", "mamba_rms_norm": true})",
                  true},
        std::pair{R"({"model_type": "falcon_h1", "mamba_rms_norm": true,
                      "mamba_norm_before_gate": false})",
                  false}}) {
    llvm::Expected<ModelDescription> normed = parseModelInput(json);
    ASSERT_TRUE(static_cast<bool>(normed))
        << llvm::toString(normed.takeError());
    const auto &mixer = std::get<LinearAttentionLayer>(normed->layers[0]);
    EXPECT_EQ(mixer.outputGate, OutputGate::RmsNormSilu);
    EXPECT_EQ(mixer.normBeforeGate, before);
    EXPECT_TRUE(mixer.skip);
  }
}

// attn's "speculative" key in a Hugging Face config turns on draft-tree
// verification for every layer kind (SPEC §10).
TEST(HuggingFaceConfig, SpeculativeAddsTheTreeEntries) {
  std::string json = std::string(R"({"model_type": "qwen3_next",
    "layer_types": ["linear_attention", "full_attention"],
    "speculative": {"max_tree_nodes": 64}, )") +
                     kQwenHeads + "}";
  llvm::Expected<ModelDescription> model = parseModelInput(json);
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  EXPECT_EQ(model->maxTreeNodes, 64);
  EXPECT_TRUE(std::get<LinearAttentionLayer>(model->layers[0]).tree);
  EXPECT_TRUE(std::get<AttentionLayer>(model->layers[1]).tree);
  MLIRContext context;
  OwningOpRef<ModuleOp> module = buildAttnModule(context, *model);
  ASSERT_TRUE(succeeded(verify(*module)));
  std::vector<std::string> names;
  for (const auto &entry : entrySignatures(*module))
    names.push_back(entry.first);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "linear_attention", "linear_attention.tree",
                       "linear_attention.commit", "full_attention",
                       "full_attention.tree", "full_attention.compact",
                       "verify.accept"}));
  EXPECT_EQ(configError(std::string(R"({"model_type": "qwen3_next",
    "layer_types": ["linear_attention"],
    "speculative": {"max_tree_nodes": 300}, )") +
                        kQwenHeads + "}"),
            "$.speculative.max_tree_nodes: expected at most 256 with a linear "
            "layer's \"tree\", got 300");
  EXPECT_EQ(configError(std::string(R"({"model_type": "qwen3_next",
    "layer_types": ["full_attention"], "speculative": {"nodes": 8}, )") +
                        kQwenHeads + "}"),
            "$.speculative: unknown key 'nodes'; expected one of: "
            "max_tree_nodes");
}

TEST(HuggingFaceConfig, ErrorsNameThePathAndTheExpectation) {
  EXPECT_EQ(configError(R"({"model_type": "mamba", "num_hidden_layers": 2})"),
            "$.model_type: unsupported Hugging Face model type \"mamba\"; "
            "supported: qwen3_next, qwen3_5, qwen3_5_text, qwen3_5_moe, "
            "qwen3_5_moe_text, llama, mistral, qwen2, qwen3, qwen3_moe, "
            "mixtral, phi3, olmo2, gemma2, "
            "gemma3_text, gemma3, llama4_text, llama4, gpt_oss, deepseek_v2, "
            "deepseek_v3, kimi_k2, kimi_linear, mamba2, nemotron_h, granite, "
            "granitemoe, granitemoeshared, granitemoehybrid, bamba, "
            "falcon_h1, minimax, minimax_m2");
  EXPECT_EQ(configError(R"({"model_type": 3})"),
            "$.model_type: expected a string, got 3");
  EXPECT_EQ(configError(std::string(R"({"model_type": "qwen3_next",
    "layer_types": ["full_attention", "mamba"], )") +
                        kQwenHeads + "}"),
            "$.layer_types[1]: expected \"full_attention\" or "
            "\"linear_attention\", got \"mamba\"");
  EXPECT_EQ(configError(std::string(R"({"model_type": "qwen3_next",
    "num_hidden_layers": 8, )") +
                        kQwenHeads + "}"),
            "$: missing required key 'full_attention_interval'");
  EXPECT_EQ(configError(R"({"model_type": "qwen3_next",
    "layer_types": ["linear_attention"], "linear_num_key_heads": 3,
    "linear_num_value_heads": 8, "linear_key_head_dim": 32,
    "linear_value_head_dim": 32})"),
            "$.linear_num_value_heads: expected a multiple of "
            "linear_num_key_heads (3), got 8");
  EXPECT_EQ(configError(R"({"model_type": "qwen3_next",
    "layer_types": ["linear_attention"], "linear_num_key_heads": 4,
    "linear_num_value_heads": 8, "linear_key_head_dim": 0,
    "linear_value_head_dim": 32})"),
            "$.linear_key_head_dim: expected a positive integer, got 0");
  EXPECT_EQ(configError(R"({"model_type": "qwen3_next",
    "layer_types": ["full_attention"], "num_attention_heads": 8,
    "num_key_value_heads": 3, "head_dim": 64})"),
            "$.num_attention_heads: expected a multiple of "
            "num_key_value_heads (3), got 8");
}

// A config without head_dim whose hidden_size / num_attention_heads is 0
// once compiled to head dim 0; num_hidden_layers = 1e15 once hung.
TEST(HuggingFaceConfig, SizesAreBounded) {
  EXPECT_EQ(configError(R"({"model_type": "qwen3_next",
    "layer_types": ["full_attention"], "num_attention_heads": 16,
    "hidden_size": 8})"),
            "$.hidden_size: without head_dim, the head dim is hidden_size / "
            "num_attention_heads = 8 / 16 = 0; expected 1 to 576 (give "
            "head_dim)");
  EXPECT_EQ(configError(std::string(R"({"model_type": "qwen3_next",
    "num_hidden_layers": 1000000000000000, "full_attention_interval": 4, )") +
                        kQwenHeads + "}"),
            "$.num_hidden_layers: expected an integer <= 4096 (attn's "
            "limit), got 1000000000000000");
  // The kinds of a long model come from one interval.
  llvm::Expected<ModelDescription> model =
      parseModelInput(std::string(R"({"model_type": "qwen3_next",
    "num_hidden_layers": 4096, "full_attention_interval": 4, )") +
                      kQwenHeads + "}");
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  EXPECT_EQ(model->layers.size(), 2u);
}

/// The softmax layer named `name` of `model`.
const AttentionLayer &softmaxLayer(const ModelDescription &model,
                                   llvm::StringRef name) {
  for (const Layer &layer : model.layers)
    if (const auto *attention = std::get_if<AttentionLayer>(&layer))
      if (attention->name == name)
        return *attention;
  ADD_FAILURE() << "no layer " << name.str();
  static AttentionLayer none;
  return none;
}

/// The layer names of a config, in order.
std::vector<std::string> layerNames(llvm::StringRef json) {
  llvm::Expected<ModelDescription> model = parseModelInput(json);
  if (!model)
    return {llvm::toString(model.takeError())};
  std::vector<std::string> names;
  for (const Layer &layer : model->layers)
    names.push_back(std::visit([](const auto &l) { return l.name; }, layer));
  return names;
}

// Softmax models: full_attention and sliding_attention kinds by each
// config class's rule, with transformers' defaults for absent keys.
TEST(HuggingFaceConfig, SoftmaxFamiliesFollowTheirConfigClasses) {
  using Names = std::vector<std::string>;
  EXPECT_EQ(layerNames(R"({"model_type": "llama"})"), Names{"full_attention"});
  EXPECT_EQ(layerNames(R"({"model_type": "mistral"})"),
            Names{"sliding_attention"});
  EXPECT_EQ(layerNames(R"({"model_type": "mistral", "sliding_window": null})"),
            Names{"full_attention"});
  // Qwen2: sliding from max_window_layers on, with use_sliding_window.
  EXPECT_EQ(layerNames(R"({"model_type": "qwen2", "num_hidden_layers": 28,
      "use_sliding_window": true, "max_window_layers": 28})"),
            Names{"full_attention"});
  EXPECT_EQ(layerNames(R"({"model_type": "qwen3", "num_hidden_layers": 28,
      "use_sliding_window": true, "max_window_layers": 0})"),
            Names{"sliding_attention"});
  // Gemma 2: even layers slide; Gemma 3: all but every pattern-th.
  EXPECT_EQ(layerNames(R"({"model_type": "gemma2", "num_hidden_layers": 1})"),
            Names{"sliding_attention"});
  EXPECT_EQ(layerNames(R"({"model_type": "gemma3_text",
      "num_hidden_layers": 5})"),
            Names{"sliding_attention"});
  EXPECT_EQ(layerNames(R"({"model_type": "gemma3_text",
      "num_hidden_layers": 4, "sliding_window_pattern": 2})"),
            (Names{"sliding_attention", "full_attention"}));
  EXPECT_EQ(layerNames(R"({"model_type": "llama",
      "layer_types": ["full_attention", "sliding_attention"],
      "sliding_window": 8})"),
            (Names{"full_attention", "sliding_attention"}));

  // Gemma 2's class defaults: 8 heads, 4 kv heads of 256, scores scaled by
  // query_pre_attn_scalar^-1/2 and capped at 50, windows of 4096.
  llvm::Expected<ModelDescription> gemma2 =
      parseModelInput(R"({"model_type": "gemma2"})");
  ASSERT_TRUE(static_cast<bool>(gemma2)) << llvm::toString(gemma2.takeError());
  const AttentionLayer &sliding = softmaxLayer(*gemma2, "sliding_attention");
  EXPECT_EQ(sliding.numHeads, 8);
  EXPECT_EQ(sliding.numKvHeads, 4);
  EXPECT_EQ(sliding.headDim, 256);
  EXPECT_EQ(sliding.mask, MaskKind::SlidingWindow);
  EXPECT_EQ(sliding.window, 4096);
  EXPECT_EQ(sliding.scale, 1.0 / 16);
  EXPECT_EQ(sliding.softcap, 50.0);
  EXPECT_EQ(sliding.gate, GateKind::None);
  const AttentionLayer &full = softmaxLayer(*gemma2, "full_attention");
  EXPECT_EQ(full.mask, MaskKind::Causal);

  // Gemma 3's multimodal config: the text model's keys, under text_config.
  llvm::Expected<ModelDescription> gemma3 = parseModelInput(R"({
      "model_type": "gemma3", "vision_config": {"num_attention_heads": 16},
      "text_config": {"num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "query_pre_attn_scalar": 168,
        "attn_logit_softcapping": null, "sliding_window": 1024,
        "num_hidden_layers": 62}})");
  ASSERT_TRUE(static_cast<bool>(gemma3)) << llvm::toString(gemma3.takeError());
  const AttentionLayer &local = softmaxLayer(*gemma3, "sliding_attention");
  EXPECT_EQ(local.numHeads, 16);
  EXPECT_EQ(local.numKvHeads, 8);
  EXPECT_EQ(local.window, 1024);
  EXPECT_EQ(local.scale, 1.0 / std::sqrt(168.0));
  EXPECT_EQ(local.softcap, 0.0);

  // Llama without head_dim: hidden_size / num_attention_heads; Qwen3's
  // class default is 128 whatever the hidden size.
  llvm::Expected<ModelDescription> llama = parseModelInput(
      R"({"model_type": "llama", "hidden_size": 2048,
          "num_attention_heads": 32, "num_key_value_heads": 8})");
  ASSERT_TRUE(static_cast<bool>(llama)) << llvm::toString(llama.takeError());
  EXPECT_EQ(softmaxLayer(*llama, "full_attention").headDim, 64);
  EXPECT_FALSE(softmaxLayer(*llama, "full_attention").scale.has_value());
  llvm::Expected<ModelDescription> qwen3 = parseModelInput(
      R"({"model_type": "qwen3", "hidden_size": 2048,
          "num_attention_heads": 32})");
  ASSERT_TRUE(static_cast<bool>(qwen3)) << llvm::toString(qwen3.takeError());
  EXPECT_EQ(softmaxLayer(*qwen3, "full_attention").headDim, 128);
  EXPECT_EQ(softmaxLayer(*qwen3, "full_attention").numKvHeads, 32);

  // The MoE and other Llama-like classes' defaults: Qwen3's MoE has 32
  // heads over 4 kv heads of hidden_size / heads (2048 / 32), and its
  // 4096-key window slides on every layer only with use_sliding_window;
  // Mixtral has no window unless given one; Phi-3's kv heads default to
  // its heads.
  llvm::Expected<ModelDescription> qwen3Moe =
      parseModelInput(R"({"model_type": "qwen3_moe"})");
  ASSERT_TRUE(static_cast<bool>(qwen3Moe))
      << llvm::toString(qwen3Moe.takeError());
  const AttentionLayer &moe = softmaxLayer(*qwen3Moe, "full_attention");
  EXPECT_EQ(moe.numHeads, 32);
  EXPECT_EQ(moe.numKvHeads, 4);
  EXPECT_EQ(moe.headDim, 64);
  EXPECT_EQ(moe.mask, MaskKind::Causal);
  EXPECT_EQ(layerNames(R"({"model_type": "qwen3_moe",
      "use_sliding_window": true, "max_window_layers": 28})"),
            Names{"sliding_attention"});
  EXPECT_EQ(layerNames(R"({"model_type": "qwen3_moe",
      "use_sliding_window": true, "sliding_window": null})"),
            Names{"full_attention"});
  EXPECT_EQ(layerNames(R"({"model_type": "mixtral"})"),
            Names{"full_attention"});
  EXPECT_EQ(layerNames(R"({"model_type": "mixtral", "sliding_window": 64})"),
            Names{"sliding_attention"});
  llvm::Expected<ModelDescription> phi3 =
      parseModelInput(R"({"model_type": "phi3", "num_attention_heads": 24})");
  ASSERT_TRUE(static_cast<bool>(phi3)) << llvm::toString(phi3.takeError());
  EXPECT_EQ(softmaxLayer(*phi3, "full_attention").numKvHeads, 24);
  EXPECT_EQ(softmaxLayer(*phi3, "full_attention").headDim, 128);

  // gpt-oss: even layers slide over GptOssConfig's 128 keys; every layer
  // has attention sinks, and the others nothing softmax layers lack.
  llvm::Expected<ModelDescription> gptOss =
      parseModelInput(R"({"model_type": "gpt_oss", "num_hidden_layers": 3})");
  ASSERT_TRUE(static_cast<bool>(gptOss)) << llvm::toString(gptOss.takeError());
  EXPECT_EQ(layerNames(R"({"model_type": "gpt_oss", "num_hidden_layers": 3})"),
            (Names{"sliding_attention", "full_attention"}));
  const AttentionLayer &oss = softmaxLayer(*gptOss, "sliding_attention");
  EXPECT_EQ(oss.numHeads, 64);
  EXPECT_EQ(oss.numKvHeads, 8);
  EXPECT_EQ(oss.headDim, 64);
  EXPECT_EQ(oss.window, 128);
  EXPECT_TRUE(oss.sinks);
  EXPECT_FALSE(oss.scale.has_value());
  EXPECT_EQ(oss.softcap, 0.0);
  EXPECT_TRUE(softmaxLayer(*gptOss, "full_attention").sinks);
  EXPECT_FALSE(softmaxLayer(*gemma2, "full_attention").sinks);

  // Llama 4: RoPE layers (no_rope_layers 1) attend within chunks of
  // attention_chunk_size, NoPE ones (0) to every earlier key; without the
  // list, every no_rope_layer_interval-th layer (4) is NoPE.
  EXPECT_EQ(layerNames(R"({"model_type": "llama4_text",
      "num_hidden_layers": 8})"),
            (Names{"chunked_attention", "full_attention"}));
  EXPECT_EQ(layerNames(R"({"model_type": "llama4_text",
      "num_hidden_layers": 3, "no_rope_layer_interval": 1})"),
            Names{"full_attention"});
  EXPECT_EQ(layerNames(R"({"model_type": "llama4_text",
      "num_hidden_layers": 2, "no_rope_layers": [0, 1]})"),
            (Names{"full_attention", "chunked_attention"}));
  llvm::Expected<ModelDescription> llama4 = parseModelInput(
      R"({"model_type": "llama4", "text_config": {"num_hidden_layers": 4}})");
  ASSERT_TRUE(static_cast<bool>(llama4)) << llvm::toString(llama4.takeError());
  const AttentionLayer &chunked = softmaxLayer(*llama4, "chunked_attention");
  EXPECT_EQ(chunked.numHeads, 40);
  EXPECT_EQ(chunked.numKvHeads, 8);
  EXPECT_EQ(chunked.headDim, 128);
  EXPECT_EQ(chunked.mask, MaskKind::Chunked);
  EXPECT_EQ(chunked.window, 8192);
  EXPECT_EQ(softmaxLayer(*llama4, "full_attention").mask, MaskKind::Causal);

  // DeepSeek (V2's defaults here): MLA expanded per head, and absorbed over
  // one latent cache whose first kv_lora_rank features are the values; no
  // rope_scaling, so the scale is qk_head_dim^-1/2 (left to the default).
  llvm::Expected<ModelDescription> deepSeek = parseModelInput(
      R"({"model_type": "deepseek_v2", "kv_lora_rank": 256,
          "qk_rope_head_dim": 32, "rope_scaling": {"type": "yarn",
          "factor": 1.0, "mscale_all_dim": 0.707}})");
  ASSERT_TRUE(static_cast<bool>(deepSeek))
      << llvm::toString(deepSeek.takeError());
  EXPECT_EQ(layerNames(R"({"model_type": "kimi_k2"})"),
            (Names{"full_attention", "latent_attention"}));
  const AttentionLayer &expanded = softmaxLayer(*deepSeek, "full_attention");
  EXPECT_EQ(expanded.numHeads, 32);
  EXPECT_EQ(expanded.numKvHeads, 32);
  EXPECT_EQ(expanded.headDim, 128 + 32);
  EXPECT_EQ(expanded.valueDim, 128);
  EXPECT_FALSE(expanded.latentKv);
  const AttentionLayer &absorbed = softmaxLayer(*deepSeek, "latent_attention");
  EXPECT_EQ(absorbed.numHeads, 32);
  EXPECT_EQ(absorbed.numKvHeads, 1);
  EXPECT_EQ(absorbed.headDim, 256 + 32);
  EXPECT_EQ(absorbed.valueDim, 256);
  EXPECT_TRUE(absorbed.latentKv);
  EXPECT_EQ(absorbed.mask, MaskKind::Causal);
  // YaRN's factor 1 leaves mscale at 1.
  ASSERT_TRUE(expanded.scale && absorbed.scale);
  EXPECT_DOUBLE_EQ(*expanded.scale, 1.0 / std::sqrt(160.0));
  EXPECT_DOUBLE_EQ(*absorbed.scale, *expanded.scale);
}

TEST(HuggingFaceConfig, SoftmaxFamilyErrorsNameThePath) {
  EXPECT_EQ(configError(R"({"model_type": "deepseek_v3",
      "layer_types": ["sliding_attention"]})"),
            "$.layer_types[0]: expected \"full_attention\", got "
            "\"sliding_attention\"");
  EXPECT_EQ(configError(R"({"model_type": "deepseek_v3",
      "kv_lora_rank": 1024})"),
            "$.kv_lora_rank: expected an integer <= 576 (attn's limit), got "
            "1024");
  EXPECT_EQ(configError(R"({"model_type": "deepseek_v3",
      "qk_rope_head_dim": 128})"),
            "$.qk_rope_head_dim: kv_lora_rank + qk_rope_head_dim = 640; "
            "attn's head dims go to 576");
  EXPECT_EQ(configError(R"({"model_type": "deepseek_v3",
      "rope_scaling": {"factor": "40", "mscale_all_dim": 1}})"),
            "$.rope_scaling.factor: expected a number, got \"40\"");
  EXPECT_EQ(configError(R"({"model_type": "llama4_text",
      "num_hidden_layers": 2, "no_rope_layers": [1, 2]})"),
            "$.no_rope_layers[1]: expected 0 (NoPE: full attention) or 1 "
            "(RoPE: chunked attention), got 2");
  EXPECT_EQ(configError(R"({"model_type": "llama4_text",
      "num_hidden_layers": 3, "no_rope_layers": [1, 0]})"),
            "$.no_rope_layers: expected one entry per layer (3), got 2");
  EXPECT_EQ(configError(R"({"model_type": "llama4_text",
      "attention_chunk_size": 0})"),
            "$.attention_chunk_size: expected a positive integer, got 0");
  EXPECT_EQ(configError(R"({"model_type": "llama",
      "layer_types": ["linear_attention"]})"),
            "$.layer_types[0]: expected \"full_attention\" or "
            "\"sliding_attention\", got \"linear_attention\"");
  EXPECT_EQ(configError(R"({"model_type": "qwen2",
      "layer_types": ["sliding_attention"], "sliding_window": null})"),
            "$.sliding_window: a sliding_attention layer needs a window: "
            "expected a positive integer, got null");
  EXPECT_EQ(configError(R"({"model_type": "gemma3"})"),
            "$.text_config: expected an object, got nothing");
  EXPECT_EQ(configError(R"({"model_type": "gemma3",
      "text_config": {"num_attention_heads": 0}})"),
            "$.text_config.num_attention_heads: expected a positive integer, "
            "got 0");
  EXPECT_EQ(configError(R"({"model_type": "gemma2",
      "query_pre_attn_scalar": -4})"),
            "$.query_pre_attn_scalar: expected a number > 0, got -4.000000");
  EXPECT_EQ(configError(R"({"model_type": "gemma2",
      "attn_logit_softcapping": "yes"})"),
            "$.attn_logit_softcapping: expected a number, got \"yes\"");
  EXPECT_EQ(configError(R"({"model_type": "mistral", "sliding_window": 0})"),
            "$.sliding_window: expected a positive integer, got 0");
  EXPECT_EQ(configError(R"({"model_type": "gemma3_text",
      "num_hidden_layers": 4, "sliding_window_pattern": 0})"),
            "$.sliding_window_pattern: expected a positive integer, got 0");
}

TEST(HuggingFaceConfig, ModelDescriptionsStillParse) {
  llvm::Expected<ModelDescription> model =
      parseModelInput(readExample("gated-attention.json"));
  ASSERT_TRUE(static_cast<bool>(model)) << llvm::toString(model.takeError());
  EXPECT_EQ(std::get<AttentionLayer>(model->layers[0]).name, "full_attention");
}

} // namespace
