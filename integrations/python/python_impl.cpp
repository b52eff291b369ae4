#include "python_impl.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "host/isolation.h"
#include "host/plugin_loader.h"
#include "problem_convert.h"

namespace attncheck::python {
namespace {

py::module_ bridge() { return py::module_::import("attncheck._bridge"); }

// The values of a float64 array the bridge returned (already checked for
// shape there; None = not returned).
std::vector<double> doubles(const py::handle& h) {
  if (h.is_none()) return {};
  const auto a = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(h);
  if (!a) throw std::logic_error("attncheck._bridge returned a value that is not an array");
  return {a.data(), a.data() + a.size()};
}

// A Python exception as the harness reports it: the bridge's contract
// errors as the C ABI's contract errors, anything else as what the
// implementation threw (one line, formatted by the bridge).
[[noreturn]] void rethrow(py::error_already_set& e) {
  const std::string what = py::str(e.value());
  if (e.matches(bridge().attr("ContractError"))) throw PluginContractError(what);
  // What the bridge does not format (it catches Exception): a
  // KeyboardInterrupt, a SystemExit, a bare BaseException, named by type
  // with its message ("SystemExit: 0", "KeyboardInterrupt").
  if (!e.matches(PyExc_Exception)) {
    const std::string type = py::str(e.type().attr("__name__"));
    throw std::runtime_error(what.empty() ? type : type + ": " + what);
  }
  throw std::runtime_error(what);
}

// One implementation a Python file declares: every call goes through the
// bridge, which builds the problem's arrays, calls the function and checks
// what it returned.
class PythonImplementation final : public Implementation {
 public:
  PythonImplementation(ImplInfo info, py::object decl)
      : info_(std::move(info)), decl_(std::move(decl)) {}
  ~PythonImplementation() override {
    py::gil_scoped_acquire gil;
    decl_ = py::object();
  }

  const ImplInfo& info() const override { return info_; }

  ForwardResult forward(const Problem& p) const override {
    py::gil_scoped_acquire gil;
    try {
      const py::tuple r = bridge().attr("forward")(decl_, problem_to_py(p));
      ForwardResult f;
      const auto status = r[0].cast<std::string>();
      f.status = status == "ok" ? Status::ok : status == "error" ? Status::error : Status::unsupported;
      f.error = r[1].cast<std::string>();
      f.out = doubles(r[2]);
      f.weights = doubles(r[3]);
      f.lse = doubles(r[4]);
      f.path = path_index(r[5]);
      return f;
    } catch (py::error_already_set& e) {
      rethrow(e);
    }
  }

  // Declared only with a backward callable (FEATURE_BACKWARD), so the
  // harness calls it only then.
  BackwardResult backward(const Problem& p) const override {
    py::gil_scoped_acquire gil;
    try {
      const py::tuple r = bridge().attr("backward")(decl_, problem_to_py(p));
      BackwardResult b;
      const auto status = r[0].cast<std::string>();
      b.status = status == "ok" ? Status::ok : status == "error" ? Status::error : Status::unsupported;
      b.error = r[1].cast<std::string>();
      b.dq = doubles(r[2]);
      b.dk = doubles(r[3]);
      b.dv = doubles(r[4]);
      return b;
    } catch (py::error_already_set& e) {
      rethrow(e);
    }
  }

 private:
  // The index in info_.paths of the path a forward named (the bridge
  // checked the name), -1 when it said none.
  int path_index(const py::handle& name) const {
    if (name.is_none()) return -1;
    const auto n = name.cast<std::string>();
    for (size_t i = 0; i < info_.paths.size(); ++i)
      if (info_.paths[i].name == n) return static_cast<int>(i);
    throw PluginContractError(fmt::format("returned path '{}', which is not a declared path", n));
  }

  ImplInfo info_;
  py::object decl_;  // the attncheck.Implementation
};

}  // namespace

void register_python_loader() {
  register_worker_loader("python", [](const std::string& path) {
    py::gil_scoped_acquire gil;
    std::vector<std::shared_ptr<const Implementation>> impls;
    try {
      for (const py::handle decl : bridge().attr("load_file")(path)) {
        ImplInfo info = info_from_py(decl.attr("_declaration")(), path);
        impls.push_back(std::make_shared<PythonImplementation>(
            std::move(info), py::reinterpret_borrow<py::object>(decl)));
      }
    } catch (py::error_already_set& e) {
      throw InputError(fmt::format("{}: {}", path, std::string(py::str(e.value()))));
    }
    return impls;
  });
}

}  // namespace attncheck::python
