// RUN: not attn-opt %s -attn-gpu-dispatches=flash-warpgroups=3 2>&1 | FileCheck %s --check-prefix=WARPGROUPS
// RUN: not attn-opt %s -attn-gpu-dispatches=flash-row-tiles=3 2>&1 | FileCheck %s --check-prefix=ROWTILES

// A tiling the CUDA kernels cannot take is refused before any lowering,
// naming every option's bounds.
// WARPGROUPS: error: bad CUDA tiling: {{.*}} flash-warpgroups (3) 0, 1 or 2
// ROWTILES: error: bad CUDA tiling: {{.*}} flash-row-tiles (3) 1 or 2
func.func @empty() {
  return
}
