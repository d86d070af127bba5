//===- GuardedMemory.cpp - Buffers that end at an inaccessible page -------===//

#include "runtime/GuardedMemory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace attn::host {

bool guardEachCall() {
  static const bool guard = [] {
    const char *value = std::getenv("ATTN_GUARD");
    return value && *value && std::strcmp(value, "0") != 0;
  }();
  return guard;
}

bool guardAtStart() {
  static const bool atStart = [] {
    const char *value = std::getenv("ATTN_GUARD");
    return value && std::strcmp(value, "start") == 0;
  }();
  return atStart;
}

std::unique_ptr<GuardedBlock> GuardedBlock::map(size_t bytes, bool atStart) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (!bytes || bytes > SIZE_MAX - 3 * page)
    return nullptr;
  const size_t inside = (bytes + page - 1) / page * page;
  void *base = mmap(nullptr, inside + 2 * page, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    return nullptr;
  std::unique_ptr<GuardedBlock> block(new GuardedBlock);
  block->base = static_cast<uint8_t *>(base);
  block->mapped = inside + 2 * page;
  block->pages = block->base + page;
  block->inside = inside;
  block->data = atStart ? block->pages : block->pages + inside - bytes;
  if (mprotect(block->pages, inside, PROT_READ | PROT_WRITE) != 0)
    return nullptr;
  return block;
}

bool GuardedBlock::makeReadOnly() {
  return mprotect(pages, inside, PROT_READ) == 0;
}

GuardedBlock::~GuardedBlock() { munmap(base, mapped); }

attn_status GuardedTensors::guard(const Entry &e,
                                  std::vector<Buffer> &buffers) {
  for (size_t i = 0; i < buffers.size(); ++i) {
    callerData.push_back(buffers[i].data);
    blocks.emplace_back();
    const size_t bytes = buffers[i].bytes();
    if (!buffers[i].data || !bytes)
      continue;
    std::unique_ptr<GuardedBlock> &block = blocks.back();
    block = GuardedBlock::map(bytes);
    if (!block)
      return fail(ATTN_RUN_ERROR, "entry '" + e.name +
                                      "': ATTN_GUARD could not map " +
                                      std::to_string(bytes) + " bytes");
    std::memcpy(block->data, buffers[i].data, bytes);
    if (!e.writes(i) && !block->makeReadOnly())
      return fail(ATTN_RUN_ERROR,
                  "entry '" + e.name +
                      "': ATTN_GUARD could not protect an input");
    buffers[i].data = block->data;
  }
  return ATTN_OK;
}

void GuardedTensors::restore(const Entry &e, std::vector<Buffer> &buffers,
                             bool succeeded) {
  for (size_t i = 0; i < callerData.size(); ++i) {
    if (succeeded && blocks[i] && e.writes(i))
      std::memcpy(callerData[i], blocks[i]->data, buffers[i].bytes());
    buffers[i].data = callerData[i];
  }
}

} // namespace attn::host
