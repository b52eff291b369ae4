#pragma once
// The eager kernel: attention as framework code written op by op computes
// it in a 16-bit format (PyTorch eager, Hugging Face's "eager" attention),
// every intermediate tensor stored in that format.

#include "attncheck/implementation.h"
#include "attncheck/problem.h"

namespace attncheck::impls {

/// Attention in `format` (bf16 or f16) the way eager framework code runs
/// it, each step an op that computes in float and stores its result in
/// `format`:
///   S = matmul(Q, K^T)                f32 accumulation, rounded
///   S = S * scale                     rounded again (scale applied after the matmul)
///   S = tanh(S / c) * c               with a softcap: /, tanh, * each rounded
///   S = S + bias                      rounded
///   S = masked_fill(S, ~allowed, -inf)
///   P = softmax(S, dtype=float32).to(format)   max, exp, sum in float
///   O = matmul(P, V)                  f32 accumulation, rounded
/// Returns out and the weights P as stored (after their rounding); no lse,
/// which eager code never forms. A problem with an empty row gets the
/// error of an `error`-policy implementation.
ForwardResult eager_forward(const Problem& p, DType format);

/// The declaration of eager_forward for `format` under `name`: accumulation
/// in f32, S and P stored in `format` (s_cast, p_cast), the C library's
/// expf (1 ulp), no flush; features: every mask kind, bias, softcap, GQA,
/// strides, weights, any scale, both alignments.
ImplInfo eager_info(std::string name, DType format, std::string description);

}  // namespace attncheck::impls
