// RUN: attn-opt %s -attn-expand-math | FileCheck %s

// The math ops some target's LLVM lowering does not take, rewritten into
// ops every target takes; the others stay.

// clampf is a clamp (the definition upstream adopted after LLVM 22, whose
// own expansion gives max(min(x, lo), hi)).
// CHECK-LABEL: func.func @clamp(
// CHECK-SAME:    %[[X:.+]]: f32, %[[LO:.+]]: f32, %[[HI:.+]]: f32)
// CHECK:         %[[BELOW:.+]] = arith.minimumf %[[X]], %[[HI]] : f32
// CHECK:         %[[R:.+]] = arith.maximumf %[[BELOW]], %[[LO]] : f32
// CHECK:         return %[[R]]
func.func @clamp(%x: f32, %lo: f32, %hi: f32) -> f32 {
  %r = math.clampf %x to [%lo, %hi] : f32
  return %r : f32
}

// isinf and isnormal compare the magnitude: NaN is neither.
// CHECK-LABEL: func.func @classes(
// CHECK-SAME:    %[[X:.+]]: vector<8xf32>)
// CHECK-DAG:     %[[INF:.+]] = arith.constant dense<0x7F800000> : vector<8xf32>
// CHECK-DAG:     %[[NORMAL:.+]] = arith.constant dense<1.17549435E-38> : vector<8xf32>
// CHECK:         %[[A:.+]] = math.absf %[[X]] : vector<8xf32>
// CHECK:         %[[ISINF:.+]] = arith.cmpf oeq, %[[A]], %[[INF]] : vector<8xf32>
// CHECK:         %[[B:.+]] = math.absf %[[X]] : vector<8xf32>
// CHECK:         %[[GE:.+]] = arith.cmpf oge, %[[B]], %[[NORMAL]] : vector<8xf32>
// CHECK:         %[[LT:.+]] = arith.cmpf olt, %[[B]], %[[INF]] : vector<8xf32>
// CHECK:         %[[ISNORMAL:.+]] = arith.andi %[[GE]], %[[LT]] : vector<8xi1>
// CHECK:         return %[[ISINF]], %[[ISNORMAL]]
func.func @classes(%x: vector<8xf32>) -> (vector<8xi1>, vector<8xi1>) {
  %i = math.isinf %x : vector<8xf32>
  %n = math.isnormal %x : vector<8xf32>
  return %i, %n : vector<8xi1>, vector<8xi1>
}

// ipowi squares over the exponent's 31 bits below the sign; a negative
// exponent selects 1 / x^-n in integers.
// CHECK-LABEL: func.func @power(
// CHECK-NOT:     math.ipowi
// CHECK-COUNT-31: arith.andi %{{.+}}, %{{.+}} : i32
// CHECK:         %[[NEG:.+]] = arith.cmpi slt, %{{.+}}, %{{.+}} : i32
// CHECK:         arith.select %[[NEG]], %{{.+}}, %{{.+}} : i32
func.func @power(%x: i32, %n: i32) -> i32 {
  %r = math.ipowi %x, %n : i32
  return %r : i32
}

// Upstream's expansions: acosh through log and sqrt; vector fpowi.
// CHECK-LABEL: func.func @upstream(
// CHECK-NOT:     math.acosh
// CHECK-NOT:     math.fpowi
// CHECK:         math.log
func.func @upstream(%x: vector<8xf32>, %n: vector<8xi32>) -> (vector<8xf32>, vector<8xf32>) {
  %a = math.acosh %x : vector<8xf32>
  %p = math.fpowi %x, %n : vector<8xf32>, vector<8xi32>
  return %a, %p : vector<8xf32>, vector<8xf32>
}

// What every target lowers stays.
// CHECK-LABEL: func.func @kept(
// CHECK:         math.ctlz
// CHECK:         math.trunc
// CHECK:         math.exp
func.func @kept(%i: i32, %x: f32) -> (i32, f32, f32) {
  %c = math.ctlz %i : i32
  %t = math.trunc %x : f32
  %e = math.exp %x : f32
  return %c, %t, %e : i32, f32, f32
}
