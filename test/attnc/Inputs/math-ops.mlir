// Every math op (and the integer forms), in one score_mod: each target must
// lower all of them (test/attnc/variant-math-ops*.test).
func.func @every_math_op(%q: tensor<?x2x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                         %v: tensor<?x2x?x16xf32>) -> tensor<?x2x?x16xf32> {
  %o = attn.sdpa %q, %k, %v {mask = #attn.mask<causal>}
      : tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>
    score_mod {
    ^bb0(%s: f32, %b: index, %h: index, %qp: index, %kp: index):
      %kpi = arith.index_cast %kp : index to i32
      %zero = arith.constant 0.0 : f32
      %acc0 = arith.addf %s, %zero : f32
      %absf = math.absf %s : f32
      %acc1 = arith.addf %acc0, %absf : f32
      %acos = math.acos %s : f32
      %acc2 = arith.addf %acc1, %acos : f32
      %acosh = math.acosh %s : f32
      %acc3 = arith.addf %acc2, %acosh : f32
      %asin = math.asin %s : f32
      %acc4 = arith.addf %acc3, %asin : f32
      %asinh = math.asinh %s : f32
      %acc5 = arith.addf %acc4, %asinh : f32
      %atan = math.atan %s : f32
      %acc6 = arith.addf %acc5, %atan : f32
      %atanh = math.atanh %s : f32
      %acc7 = arith.addf %acc6, %atanh : f32
      %cbrt = math.cbrt %s : f32
      %acc8 = arith.addf %acc7, %cbrt : f32
      %ceil = math.ceil %s : f32
      %acc9 = arith.addf %acc8, %ceil : f32
      %cos = math.cos %s : f32
      %acc10 = arith.addf %acc9, %cos : f32
      %cosh = math.cosh %s : f32
      %acc11 = arith.addf %acc10, %cosh : f32
      %erf = math.erf %s : f32
      %acc12 = arith.addf %acc11, %erf : f32
      %erfc = math.erfc %s : f32
      %acc13 = arith.addf %acc12, %erfc : f32
      %exp = math.exp %s : f32
      %acc14 = arith.addf %acc13, %exp : f32
      %exp2 = math.exp2 %s : f32
      %acc15 = arith.addf %acc14, %exp2 : f32
      %expm1 = math.expm1 %s : f32
      %acc16 = arith.addf %acc15, %expm1 : f32
      %floor = math.floor %s : f32
      %acc17 = arith.addf %acc16, %floor : f32
      %log = math.log %s : f32
      %acc18 = arith.addf %acc17, %log : f32
      %log10 = math.log10 %s : f32
      %acc19 = arith.addf %acc18, %log10 : f32
      %log1p = math.log1p %s : f32
      %acc20 = arith.addf %acc19, %log1p : f32
      %log2 = math.log2 %s : f32
      %acc21 = arith.addf %acc20, %log2 : f32
      %round = math.round %s : f32
      %acc22 = arith.addf %acc21, %round : f32
      %roundeven = math.roundeven %s : f32
      %acc23 = arith.addf %acc22, %roundeven : f32
      %rsqrt = math.rsqrt %s : f32
      %acc24 = arith.addf %acc23, %rsqrt : f32
      %sin = math.sin %s : f32
      %acc25 = arith.addf %acc24, %sin : f32
      %sinh = math.sinh %s : f32
      %acc26 = arith.addf %acc25, %sinh : f32
      %sqrt = math.sqrt %s : f32
      %acc27 = arith.addf %acc26, %sqrt : f32
      %tan = math.tan %s : f32
      %acc28 = arith.addf %acc27, %tan : f32
      %tanh = math.tanh %s : f32
      %acc29 = arith.addf %acc28, %tanh : f32
      %trunc = math.trunc %s : f32
      %acc30 = arith.addf %acc29, %trunc : f32
      %atan2 = math.atan2 %s, %s : f32
      %acc31 = arith.addf %acc30, %atan2 : f32
      %copysign = math.copysign %s, %s : f32
      %acc32 = arith.addf %acc31, %copysign : f32
      %powf = math.powf %s, %s : f32
      %acc33 = arith.addf %acc32, %powf : f32
      %isfinite = math.isfinite %s : f32
      %isfinite_f = arith.select %isfinite, %s, %zero : f32
      %acc34 = arith.addf %acc33, %isfinite_f : f32
      %isinf = math.isinf %s : f32
      %isinf_f = arith.select %isinf, %s, %zero : f32
      %acc35 = arith.addf %acc34, %isinf_f : f32
      %isnan = math.isnan %s : f32
      %isnan_f = arith.select %isnan, %s, %zero : f32
      %acc36 = arith.addf %acc35, %isnan_f : f32
      %isnormal = math.isnormal %s : f32
      %isnormal_f = arith.select %isnormal, %s, %zero : f32
      %acc37 = arith.addf %acc36, %isnormal_f : f32
      %absi = math.absi %kpi : i32
      %absi_f = arith.sitofp %absi : i32 to f32
      %acc38 = arith.addf %acc37, %absi_f : f32
      %ctlz = math.ctlz %kpi : i32
      %ctlz_f = arith.sitofp %ctlz : i32 to f32
      %acc39 = arith.addf %acc38, %ctlz_f : f32
      %ctpop = math.ctpop %kpi : i32
      %ctpop_f = arith.sitofp %ctpop : i32 to f32
      %acc40 = arith.addf %acc39, %ctpop_f : f32
      %cttz = math.cttz %kpi : i32
      %cttz_f = arith.sitofp %cttz : i32 to f32
      %acc41 = arith.addf %acc40, %cttz_f : f32
      %fma = math.fma %s, %s, %s : f32
      %acc42 = arith.addf %acc41, %fma : f32
      %c3 = arith.constant 3 : i32
      %ipowi = math.ipowi %kpi, %c3 : i32
      %ipowi_f = arith.sitofp %ipowi : i32 to f32
      %acc43 = arith.addf %acc42, %ipowi_f : f32
      %fpowi = math.fpowi %s, %kpi : f32, i32
      %acc44 = arith.addf %acc43, %fpowi : f32
      %lo = arith.constant -1.0 : f32
      %hi = arith.constant 1.0 : f32
      %clampf = math.clampf %s to [%lo, %hi] : f32
      %acc45 = arith.addf %acc44, %clampf : f32
      %c7 = arith.constant 7 : index
      %ipowi_index = math.ipowi %kp, %c7 : index
      %ii = arith.index_cast %ipowi_index : index to i32
      %ii_f = arith.sitofp %ii : i32 to f32
      %acc46 = arith.addf %acc45, %ii_f : f32
      attn.yield %acc46 : f32
    }
  return %o : tensor<?x2x?x16xf32>
}
