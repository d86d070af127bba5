//===- AttnInterfaces.cpp - Attention op interface ------------------------===//

#include "Attn/AttnInterfaces.h"

#include "Attn/AttnInterfaces.cpp.inc"
