//===- BinaryWriter.cpp - The .attnb writer -------------------------------===//

#include "compiler/BinaryWriter.h"

#include "Attn/AttnOps.h"
#include "AttnKernel/AttnKernelOps.h"
#include "runtime/Checksum.h"
#include "runtime/schemas/attnb_generated.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::attn;
namespace fb = ::attn::fb;

namespace {
/// One entry's host program: parallel vectors of step types and steps.
struct Program {
  std::vector<fb::Step> types;
  std::vector<flatbuffers::Offset<void>> steps;
};
} // namespace

struct BinaryWriter::Impl {
  flatbuffers::FlatBufferBuilder builder;
  /// An entry under construction; its table is built by finish().
  struct PendingEntry {
    std::string name;
    std::vector<flatbuffers::Offset<fb::TensorSignature>> inputs, outputs;
    Program cpu, cuda;
  };
  std::vector<PendingEntry> entries;
  /// The binding types of every kernel of each target, by exported name.
  std::vector<flatbuffers::Offset<fb::KernelAbi>> cpuAbis, cudaAbis;

  LogicalResult addKernelAbis(ModuleOp module, CodeTarget target);
  LogicalResult addEntry(func::FuncOp host, CodeTarget target, size_t position);
};

BinaryWriter::BinaryWriter() : impl(std::make_unique<Impl>()) {}
BinaryWriter::~BinaryWriter() = default;

namespace {

FailureOr<fb::DType> dtypeOf(Type elementType) {
  if (elementType.isF32())
    return fb::DType::f32;
  if (elementType.isInteger(32))
    return fb::DType::i32;
  if (elementType.isF16())
    return fb::DType::f16;
  if (elementType.isBF16())
    return fb::DType::bf16;
  return failure();
}

/// dtypeOf, plus the dtypes only temporaries hold.
FailureOr<fb::DType> temporaryDtypeOf(Type elementType) {
  if (elementType.isF64())
    return fb::DType::f64;
  if (elementType.isInteger(8))
    return fb::DType::i8;
  return dtypeOf(elementType);
}

/// The exported name of kernel `symbol` in `target`'s code.
std::string exportedKernelName(StringRef symbol, CodeTarget target) {
  return ((target == CodeTarget::Cpu ? "attn_kernel_" : "") + symbol).str();
}

/// Builds one entry's program: registers are step indices.
class HostProgramBuilder {
public:
  /// `target`'s code exports the kernels the program dispatches.
  HostProgramBuilder(flatbuffers::FlatBufferBuilder &builder, func::FuncOp host,
                     CodeTarget target)
      : builder(builder), host(host), target(target) {}

  LogicalResult build() {
    for (BlockArgument arg : host.getArguments())
      bufferIds[arg] = arg.getArgNumber();
    for (Operation &op : host.getBody().front())
      if (failed(add(op)))
        return failure();
    return success();
  }

  Program program;

private:
  int32_t addStep(fb::Step type, flatbuffers::Offset<void> step) {
    program.types.push_back(type);
    program.steps.push_back(step);
    return static_cast<int32_t>(program.steps.size() - 1);
  }
  int32_t addIntOp(fb::IntOpKind kind, int32_t a = 0, int32_t b = 0,
                   int32_t c = 0, int64_t value = 0) {
    return addStep(fb::Step::IntOp,
                   fb::CreateIntOp(builder, kind, a, b, c, value).Union());
  }
  int32_t reg(Value v) { return registers.lookup(v); }

  LogicalResult add(Operation &op) {
    using Kind = fb::IntOpKind;
    auto binary = [&](Kind kind) {
      registers[op.getResult(0)] =
          addIntOp(kind, reg(op.getOperand(0)), reg(op.getOperand(1)));
      return success();
    };
    return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
        .Case([&](arith::ConstantOp c) -> LogicalResult {
          auto attr = dyn_cast<IntegerAttr>(c.getValue());
          if (!attr)
            return c.emitError("a host program holds integer constants only");
          registers[c] =
              addIntOp(Kind::Constant, 0, 0, 0, attr.getValue().getSExtValue());
          return success();
        })
        .Case([&](memref::DimOp dim) -> LogicalResult {
          std::optional<int64_t> index = getConstantIntValue(dim.getIndex());
          if (!index || !bufferIds.count(dim.getSource()))
            return dim.emitError("a host program reads constant dims of "
                                 "arguments or temporaries only");
          registers[dim] = addIntOp(Kind::BufferDim, bufferIds[dim.getSource()],
                                    static_cast<int32_t>(*index));
          return success();
        })
        .Case([&](arith::AddIOp) { return binary(Kind::Add); })
        .Case([&](arith::SubIOp) { return binary(Kind::Sub); })
        .Case([&](arith::MulIOp) { return binary(Kind::Mul); })
        .Case([&](arith::DivUIOp) { return binary(Kind::DivU); })
        .Case([&](arith::CeilDivUIOp) { return binary(Kind::CeilDivU); })
        .Case([&](arith::RemUIOp) { return binary(Kind::RemU); })
        .Case([&](arith::DivSIOp) { return binary(Kind::DivS); })
        .Case([&](arith::CeilDivSIOp) { return binary(Kind::CeilDivS); })
        .Case([&](arith::FloorDivSIOp) { return binary(Kind::FloorDivS); })
        .Case([&](arith::RemSIOp) { return binary(Kind::RemS); })
        .Case([&](arith::MinUIOp) { return binary(Kind::MinU); })
        .Case([&](arith::MaxUIOp) { return binary(Kind::MaxU); })
        .Case([&](arith::MinSIOp) { return binary(Kind::MinS); })
        .Case([&](arith::MaxSIOp) { return binary(Kind::MaxS); })
        .Case([&](WorkerCountOp count) {
          registers[count] = addIntOp(Kind::WorkerCount, 0, 0, 0, 0);
          return success();
        })
        .Case([&](arith::IndexCastOp cast) {
          registers[cast] = reg(cast.getIn());
          return success();
        })
        .Case([&](arith::SelectOp select) {
          registers[select] =
              addIntOp(Kind::Select, reg(select.getCondition()),
                       reg(select.getTrueValue()), reg(select.getFalseValue()));
          return success();
        })
        .Case([&](arith::CmpIOp cmp) {
          using P = arith::CmpIPredicate;
          Kind kind = Kind::CmpEq;
          switch (cmp.getPredicate()) {
          case P::eq:
            kind = Kind::CmpEq;
            break;
          case P::ne:
            kind = Kind::CmpNe;
            break;
          case P::slt:
            kind = Kind::CmpSlt;
            break;
          case P::sle:
            kind = Kind::CmpSle;
            break;
          case P::sgt:
            kind = Kind::CmpSgt;
            break;
          case P::sge:
            kind = Kind::CmpSge;
            break;
          case P::ult:
            kind = Kind::CmpUlt;
            break;
          case P::ule:
            kind = Kind::CmpUle;
            break;
          case P::ugt:
            kind = Kind::CmpUgt;
            break;
          case P::uge:
            kind = Kind::CmpUge;
            break;
          }
          return binary(kind);
        })
        .Case([&](memref::AllocOp alloc) -> LogicalResult {
          MemRefType type = alloc.getType();
          FailureOr<fb::DType> dtype = temporaryDtypeOf(type.getElementType());
          if (failed(dtype))
            return alloc.emitError(
                "temporaries hold f32, f16, bf16, f64, i32 or i8");
          std::vector<int32_t> dims;
          auto dynamicSizes = alloc.getDynamicSizes();
          unsigned next = 0;
          for (int64_t size : type.getShape())
            dims.push_back(ShapedType::isDynamic(size)
                               ? reg(dynamicSizes[next++])
                               : addIntOp(Kind::Constant, 0, 0, 0, size));
          bufferIds[alloc] =
              static_cast<int32_t>(host.getNumArguments() + numTemps++);
          addStep(fb::Step::TempBuffer,
                  fb::CreateTempBufferDirect(builder, *dtype, &dims).Union());
          return success();
        })
        .Case([&](IndexStatusOp status) {
          // Bound by the runtime, not allocated: its record of index errors.
          std::vector<int32_t> dims = {
              addIntOp(Kind::Constant, 0, 0, 0, IndexStatusOp::kFields)};
          bufferIds[status] =
              static_cast<int32_t>(host.getNumArguments() + numTemps++);
          addStep(fb::Step::TempBuffer,
                  fb::CreateTempBufferDirect(builder, fb::DType::i32, &dims,
                                             /*index_status=*/true)
                      .Union());
          return success();
        })
        .Case([&](DispatchOp dispatch) -> LogicalResult {
          std::vector<int32_t> bindings;
          for (Value binding : dispatch.getBindings()) {
            if (!bufferIds.count(binding))
              return dispatch.emitError(
                  "a dispatch binds arguments or temporaries only");
            bindings.push_back(bufferIds[binding]);
          }
          std::string kernel = exportedKernelName(dispatch.getKernel(), target);
          addStep(fb::Step::Dispatch,
                  fb::CreateDispatchDirect(builder, kernel.c_str(),
                                           reg(dispatch.getWorkgroups()),
                                           &bindings)
                      .Union());
          return success();
        })
        .Case([&](cf::AssertOp assertOp) {
          addStep(fb::Step::Assert,
                  fb::CreateAssertDirect(builder, reg(assertOp.getArg()),
                                         assertOp.getMsg().str().c_str())
                      .Union());
          return success();
        })
        .Case([&](memref::CastOp cast) -> LogicalResult {
          // The canonicalizer makes an allocation with constant sizes
          // static and casts it back to the type its users bind; both
          // types name the one buffer.
          if (!bufferIds.count(cast.getSource()))
            return cast.emitError(
                "a host program casts arguments or temporaries only");
          bufferIds[cast] = bufferIds[cast.getSource()];
          return success();
        })
        .Case([&](memref::DeallocOp) { return success(); })
        .Case([&](func::ReturnOp) { return success(); })
        .Default([&](Operation *other) {
          return other->emitError()
                 << "'" << other->getName()
                 << "' cannot be part of a host dispatch program";
        });
  }

  flatbuffers::FlatBufferBuilder &builder;
  func::FuncOp host;
  CodeTarget target;
  llvm::DenseMap<Value, int32_t> registers;
  llvm::DenseMap<Value, int32_t> bufferIds;
  unsigned numTemps = 0;
};

} // namespace

LogicalResult BinaryWriter::Impl::addEntry(func::FuncOp host, CodeTarget target,
                                           size_t position) {
  std::string entryName = host.getSymName().str();
  bool known = position < entries.size();
  if (known && entries[position].name != entryName)
    return host.emitError()
           << "entry #" << position << " is '" << entryName << "' here but '"
           << entries[position].name << "' for the other target";
  auto numInputs = host->getAttrOfType<IntegerAttr>("attn.num_inputs");
  if (!numInputs)
    return host.emitError("an entry needs attn.num_inputs");
  // Both targets lower the same attn IR, so the first target's
  // signatures are every target's.
  std::vector<flatbuffers::Offset<fb::TensorSignature>> inputs, outputs;
  for (BlockArgument arg : host.getArguments()) {
    if (known)
      break;
    unsigned index = arg.getArgNumber();
    bool isInput = index < numInputs.getInt();
    auto type = cast<MemRefType>(arg.getType());
    FailureOr<fb::DType> dtype = dtypeOf(type.getElementType());
    if (failed(dtype))
      return host.emitError()
             << "argument #" << index
             << ": entries take f32, f16, bf16 or i32 tensors, got "
             << type.getElementType();
    std::string name;
    if (auto attr = host.getArgAttrOfType<StringAttr>(index, "attn.name"))
      name = attr.str();
    else
      name = isInput ? "arg" + std::to_string(index)
                     : "result" + std::to_string(index - numInputs.getInt());
    auto shape = host.getArgAttrOfType<ArrayAttr>(index, "attn.shape");
    std::vector<flatbuffers::Offset<fb::Dim>> dims;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      Attribute dim = shape ? shape[d] : Attribute();
      auto derived = dyn_cast_or_null<DictionaryAttr>(dim);
      auto derivedOf = derived ? derived.getAs<StringAttr>("of") : StringAttr();
      auto ceilDiv =
          derived ? derived.getAs<IntegerAttr>("ceil_div") : IntegerAttr();
      auto atMost =
          derived ? derived.getAs<IntegerAttr>("at_most") : IntegerAttr();
      if (!type.isDynamicDim(d))
        dims.push_back(fb::CreateDim(builder, type.getDimSize(d)));
      else if (auto symbol = dyn_cast_or_null<StringAttr>(dim))
        dims.push_back(fb::CreateDimDirect(builder, -1, symbol.str().c_str()));
      else if (derivedOf && ceilDiv && ceilDiv.getInt() > 0)
        dims.push_back(fb::CreateDimDirect(builder, -1, derivedOf.str().c_str(),
                                           ceilDiv.getInt(),
                                           atMost ? atMost.getInt() : -1));
      else
        return host.emitError() << "argument #" << index
                                << " has no symbolic shape (attn.shape)";
    }
    fb::ValueContract contract = fb::ValueContract::none;
    int32_t contractInput = -1;
    if (auto attr = host.getArgAttrOfType<StringAttr>(index, "attn.contract")) {
      if (attr.getValue() == "tree_parents")
        contract = fb::ValueContract::tree_parents;
      else if (attr.getValue() == "tree_path")
        contract = fb::ValueContract::tree_path;
      else if (attr.getValue() == "sequence_offsets")
        contract = fb::ValueContract::sequence_offsets;
      else if (attr.getValue() == "pool_slots")
        contract = fb::ValueContract::pool_slots;
      else if (attr.getValue() == "page_table")
        contract = fb::ValueContract::page_table;
      else if (attr.getValue() == "sequence_lengths")
        contract = fb::ValueContract::sequence_lengths;
      else if (attr.getValue() == "cache_slots")
        contract = fb::ValueContract::cache_slots;
      else
        return host.emitError()
               << "argument #" << index << ": unknown value contract " << attr;
      if (auto input =
              host.getArgAttrOfType<IntegerAttr>(index, "attn.contract_input"))
        contractInput = static_cast<int32_t>(input.getInt());
    }
    bool inPlace = isInput && host.getArgAttr(index, "attn.in_place");
    int32_t contractQueries = -1;
    if (auto queries =
            host.getArgAttrOfType<IntegerAttr>(index, "attn.contract_queries"))
      contractQueries = static_cast<int32_t>(queries.getInt());
    auto signature = fb::CreateTensorSignatureDirect(
        builder, name.c_str(), *dtype, &dims, contract, contractInput, inPlace,
        contractQueries);
    (isInput ? inputs : outputs).push_back(signature);
  }
  HostProgramBuilder program(builder, host, target);
  if (failed(program.build()))
    return failure();
  if (!known)
    entries.push_back(
        {entryName, std::move(inputs), std::move(outputs), {}, {}});
  (target == CodeTarget::Cpu ? entries[position].cpu : entries[position].cuda) =
      std::move(program.program);
  return success();
}

LogicalResult BinaryWriter::Impl::addKernelAbis(ModuleOp module,
                                                CodeTarget target) {
  auto &abis = target == CodeTarget::Cpu ? cpuAbis : cudaAbis;
  for (auto kernel : module.getOps<func::FuncOp>()) {
    if (!kernel->hasAttr("attn.kernel"))
      continue;
    // The bindings, then the workgroup id and count (indices).
    std::vector<flatbuffers::Offset<fb::BindingAbi>> bindings;
    for (auto [index, type] : llvm::enumerate(kernel.getArgumentTypes())) {
      if (type.isIndex())
        break;
      auto memref = dyn_cast<MemRefType>(type);
      FailureOr<fb::DType> dtype = failure();
      if (memref)
        dtype = temporaryDtypeOf(memref.getElementType());
      if (failed(dtype))
        return kernel.emitError()
               << "kernel binding #" << index
               << " must be a memref of f32, f16, bf16, f64, i32 or i8, got "
               << type;
      std::vector<int64_t> dims;
      for (int64_t size : memref.getShape())
        dims.push_back(ShapedType::isDynamic(size) ? -1 : size);
      bindings.push_back(fb::CreateBindingAbiDirect(builder, *dtype, &dims));
    }
    std::string name = exportedKernelName(kernel.getSymName(), target);
    abis.push_back(fb::CreateKernelAbiDirect(builder, name.c_str(), &bindings));
  }
  return success();
}

LogicalResult BinaryWriter::addEntries(ModuleOp module, CodeTarget target) {
  if (failed(impl->addKernelAbis(module, target)))
    return failure();
  size_t position = 0;
  for (auto host : module.getOps<func::FuncOp>())
    if (host->hasAttr("attn.entry") &&
        failed(impl->addEntry(host, target, position++)))
      return failure();
  if (!impl->entries.empty() && position != impl->entries.size())
    return module.emitError()
           << position << " entries here but " << impl->entries.size()
           << " for the other target";
  return success();
}

std::string BinaryWriter::finish(llvm::StringRef modelName,
                                 const CpuCode *cpuCode,
                                 const CudaCode *cudaCode) {
  flatbuffers::FlatBufferBuilder &builder = impl->builder;
  std::vector<flatbuffers::Offset<fb::Entry>> entries;
  auto steps = [&](const Program &program) {
    return std::make_pair(builder.CreateVector(program.types),
                          builder.CreateVector(program.steps));
  };
  for (const Impl::PendingEntry &entry : impl->entries) {
    auto [cpuTypes, cpuSteps] = steps(entry.cpu);
    auto [cudaTypes, cudaSteps] = steps(entry.cuda);
    entries.push_back(fb::CreateEntry(
        builder, builder.CreateString(entry.name),
        builder.CreateVector(entry.inputs), builder.CreateVector(entry.outputs),
        cpuTypes, cpuSteps, cudaTypes, cudaSteps));
  }

  flatbuffers::Offset<fb::CpuCode> cpu;
  if (cpuCode) {
    std::vector<flatbuffers::Offset<flatbuffers::String>> features;
    for (const std::string &feature : cpuCode->target.features)
      features.push_back(builder.CreateString(feature));
    auto so = builder.CreateVector(
        reinterpret_cast<const uint8_t *>(cpuCode->sharedObject.data()),
        cpuCode->sharedObject.size());
    cpu = fb::CreateCpuCode(
        builder, builder.CreateString(cpuCode->target.triple),
        builder.CreateString(cpuCode->target.isaLevel),
        builder.CreateVector(features), builder.CreateString(cpuCode->tiling),
        so, builder.CreateVector(impl->cpuAbis));
  }
  flatbuffers::Offset<fb::CudaCode> cuda;
  if (cudaCode) {
    std::vector<flatbuffers::Offset<fb::CudaKernel>> kernels;
    for (const CudaCode::Kernel &kernel : cudaCode->kernels)
      kernels.push_back(
          fb::CreateCudaKernel(builder, builder.CreateString(kernel.name),
                               static_cast<int32_t>(kernel.blockThreads),
                               kernel.perBlock ? fb::CudaWorkgroup::block
                                               : fb::CudaWorkgroup::thread,
                               static_cast<int32_t>(kernel.sharedBytes)));
    auto cubin = builder.CreateVector(
        reinterpret_cast<const uint8_t *>(cudaCode->cubin.data()),
        cudaCode->cubin.size());
    cuda = fb::CreateCudaCode(builder, builder.CreateString(cudaCode->chip),
                              builder.CreateString(cudaCode->tiling),
                              builder.CreateString(cudaCode->ptx), cubin,
                              builder.CreateVector(kernels),
                              builder.CreateVector(impl->cudaAbis));
  }
  auto model = fb::CreateModel(builder, builder.CreateString("attnc"),
                               builder.CreateString(modelName.str()),
                               builder.CreateVector(entries), cpu, cuda);
  builder.Finish(model);

  // The file wraps the model buffer with the format version and checksum.
  const uint8_t *payload = builder.GetBufferPointer();
  size_t payloadSize = builder.GetSize();
  flatbuffers::FlatBufferBuilder file(payloadSize + 1024);
  file.ForceVectorAlignment(payloadSize, sizeof(uint8_t), 16);
  auto nested = file.CreateVector(payload, payloadSize);
  auto binary = fb::CreateBinary(file, kAttnbFormatVersion, nested,
                                 ::attn::fnv1a64(payload, payloadSize));
  file.Finish(binary, fb::BinaryIdentifier());
  return std::string(reinterpret_cast<const char *>(file.GetBufferPointer()),
                     file.GetSize());
}
