// RUN: attn-opt %s -attn-cpu-approximate-math | FileCheck %s --check-prefix=IR
// RUN: attn-opt %s -attn-cpu-approximate-math \
// RUN:   | mlir-opt -convert-vector-to-scf -convert-scf-to-cf \
// RUN:       -convert-vector-to-llvm \
// RUN:       -convert-math-to-llvm -convert-arith-to-llvm -convert-func-to-llvm \
// RUN:       -convert-cf-to-llvm -reconcile-unrealized-casts \
// RUN:   | mlir-runner -e main -entry-point-result=void \
// RUN:       -shared-libs=%mlir_c_runner_utils \
// RUN:   | FileCheck %s

// math.exp2 on f32, which upstream's approximations leave to libm one lane
// at a time: 2^floor(x) from the exponent field, 2^(x - floor(x)) a
// polynomial. f64 keeps libm's exp2 (the reference below).

// IR-LABEL: func.func @exp2_vector
// IR-NOT: math.exp2
// IR: math.floor %{{.*}} : vector<16xf32>
// IR-COUNT-5: math.fma
// IR: arith.shli
// IR: arith.mulf
func.func @exp2_vector(%x: vector<16xf32>) -> vector<16xf32> {
  %y = math.exp2 %x : vector<16xf32>
  return %y : vector<16xf32>
}

// IR-LABEL: func.func @exp2_scalar
// IR-NOT: math.exp2 %{{.*}} : f32
func.func @exp2_scalar(%x: f32) -> f32 {
  %y = math.exp2 %x : f32
  return %y : f32
}

// The largest relative error against libm's f64 exp2 over 2^20 points of
// [-126, 128), where the result is a normal f32: at most 2 ulp (2.4e-7).
func.func @max_relative_error() -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %points = arith.constant 1048576 : index
  %first = arith.constant -126.0 : f64
  %step = arith.constant 2.4223327636718750e-04 : f64
  %zero = arith.constant 0.0 : f32
  %worst = scf.for %i = %c0 to %points step %c1 iter_args(%w = %zero) -> f32 {
    %n = arith.index_cast %i : index to i64
    %nf = arith.sitofp %n : i64 to f64
    %xd = math.fma %nf, %step, %first : f64
    %x = arith.truncf %xd : f64 to f32
    %y = func.call @exp2_scalar(%x) : (f32) -> f32
    %xw = arith.extf %x : f32 to f64
    %ref = math.exp2 %xw : f64
    %yw = arith.extf %y : f32 to f64
    %diff = arith.subf %yw, %ref : f64
    %abs = math.absf %diff : f64
    %rel = arith.divf %abs, %ref : f64
    %relf = arith.truncf %rel : f64 to f32
    %next = arith.maximumf %w, %relf : f32
    scf.yield %next : f32
  }
  return %worst : f32
}

func.func @main() {
  %worst = func.call @max_relative_error() : () -> f32
  %bound = arith.constant 2.4e-07 : f32
  %ok = arith.cmpf olt, %worst, %bound : f32
  // CHECK: within 2 ulp: 1
  vector.print str "within 2 ulp: "
  vector.print %ok : i1
  // Exactly 0 below 2^-126 and at -inf (a softmax's masked scores), exactly
  // 1 at 0, exact powers of two at integers, finite up to 128, inf from 128,
  // NaN kept.
  // (Through @exp2_vector's rewritten body: a constant operand would fold.)
  %special = arith.constant dense<[0xFF800000, -200.0, -126.5, -126.0, 0.0,
      1.0, -3.0, 0.5, -0.25, 10.0, 127.0, 127.9375, 128.0, 1000.0, 0x7FC00000,
      0xFFC00000]> : vector<16xf32>
  %y = func.call @exp2_vector(%special) : (vector<16xf32>) -> vector<16xf32>
  // CHECK-NEXT: ( 0, 0, 0, 1.17549e-38, 1, 2, 0.125, 1.41421, 0.840896, 1024, 1.70141e+38, 3.25{{[0-9]*}}e+38, inf, inf, nan, -nan )
  vector.print %y : vector<16xf32>
  return
}
