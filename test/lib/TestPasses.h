//===- TestPasses.h - Test-only passes of attn-opt --------------*- C++ -*-===//
//
// Passes that exist to let lit tests observe compiler internals (interfaces,
// analyses). They are registered in attn-opt only.
//
//===----------------------------------------------------------------------===//

#ifndef ATTN_TEST_LIB_TESTPASSES_H
#define ATTN_TEST_LIB_TESTPASSES_H

namespace mlir::attn::test {

/// Registers -test-attention-interface.
void registerTestPasses();

} // namespace mlir::attn::test

#endif // ATTN_TEST_LIB_TESTPASSES_H
