#pragma once
// Problems and declarations between C++ and Python (attncheck/_problem.py,
// attncheck/_declare.py). A problem crosses as a dict of plain values and
// NumPy arrays of doubles; the Python side gives them the problem's dtype.

#include <pybind11/pybind11.h>

#include "attncheck/implementation.h"
#include "attncheck/oracle.h"
#include "attncheck/problem.h"

namespace attncheck::python {

namespace py = pybind11;

/// The dict attncheck.Problem._from_core reads: dtype (name), q_dtype and
/// kv_dtype (names, dtype's when uniform), the dims,
/// q / k / v as (flat float64 array, strides in elements; the logical
/// values), k_blocks / v_blocks (uint8 [batch][kv_heads][tk][d/32][bytes],
/// ggml's layout, when kv_dtype is a block format; else None), key_valid
/// (uint8 [batch][tk]) or None, mask (uint8 [b|1][h|1][tq][tk]) or None,
/// bias (float64, the same shape) or None, causal, align ("top_left" or
/// "bottom_right"), window_left / window_right, scale, softcap, dout
/// (float64 [b][h][tq][dv]) or None.
py::dict problem_to_py(const Problem& p);

/// The inverse, from the dict attncheck.Problem._to_core writes (q, k, v
/// contiguous float64 arrays of their logical shape; q_dtype / kv_dtype
/// optional, k_blocks ignored: the logical values are the problem). Validated; throws
/// InputError naming the field.
Problem problem_from_py(const py::dict& d);

/// An oracle result as {"out", "weights", "lse" (and "dq", "dk", "dv" when
/// the problem has dout)}: float64 arrays of their shapes, plus
/// "uncertified": a list of (array name, index tuple).
py::dict oracle_to_py(const Problem& p, const OracleResult& r);

/// One precision as attncheck._declare._precision writes it (checked
/// there): {accum, p_cast, s_cast (or None), exp_ulps, flush_to_zero,
/// key_block, and the stages q_cast (a format, "kv" or None), score_accum,
/// softmax_accum, pv_accum (a format or None)}; a stage absent is not
/// declared. Throws InputError for a format it does not know.
PrecisionTraits precision_from_py(const py::dict& prec);

/// The declaration attncheck.Implementation._declaration() returns: name,
/// description, dtypes (names), combos (optional: combination names as
/// parse_dtype_combo reads them), features (bits), empty_rows ("error" or
/// "zero"), precision {as precision_from_py reads, and paths [{name, and
/// the same keys}]}, limits {max_tq, ...}. Kind plugin, origin `origin`.
ImplInfo info_from_py(const py::dict& d, const std::string& origin);

}  // namespace attncheck::python
