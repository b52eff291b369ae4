#pragma once
// The worker side of the bridge: implementations declared in a Python file
// (attncheck.implementation), served by an interpreter that is a worker
// (host/isolation.h; python -m attncheck._worker).

namespace attncheck::python {

/// Registers the worker loader "python": it imports a file through
/// attncheck._bridge.load_file and serves each implementation the file
/// declares, calling attncheck._bridge.forward for every problem (and
/// attncheck._bridge.backward for the gradients of one that declares a
/// backward callable).
void register_python_loader();

}  // namespace attncheck::python
