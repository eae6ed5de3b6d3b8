// kolo.torch._kolo_torch: the C++ plugin's collectives (kolo/torch.h) for Python. The
// Horovod-style API (names, handles as integers, DistributedOptimizer) is Python, in
// kolo/torch/__init__.py. Waits release the GIL; errors become kolo.torch.KoloError (a
// RuntimeError) carrying Kolo's message.
#include <pybind11/stl.h>
#include <torch/extension.h>

#include "kolo/torch.h"

namespace py = pybind11;
namespace kt = kolo::torch;

namespace {

kolo::AllreduceOptions reduction(int op, double prescale, double postscale) {
  if (!kolo::is_valid_reduce_op(op)) {
    throw kt::Error(kolo::Status::InvalidArgument("unknown reduce op " + std::to_string(op)));
  }
  return {.op = static_cast<kolo::ReduceOp>(op), .prescale = prescale, .postscale = postscale};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  static py::exception<kt::Error> error(m, "KoloError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kt::Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  m.attr("SUM") = static_cast<int>(kolo::ReduceOp::kSum);
  m.attr("AVERAGE") = static_cast<int>(kolo::ReduceOp::kAverage);
  m.attr("MIN") = static_cast<int>(kolo::ReduceOp::kMin);
  m.attr("MAX") = static_cast<int>(kolo::ReduceOp::kMax);
  m.attr("PRODUCT") = static_cast<int>(kolo::ReduceOp::kProduct);

  // Calls that wait for Kolo's background thread release the GIL.
  m.def("init", &kt::init, py::call_guard<py::gil_scoped_release>());
  m.def("shutdown", &kt::shutdown, py::call_guard<py::gil_scoped_release>());
  m.def("is_initialized", &kt::is_initialized);
  m.def("rank", &kt::rank);
  m.def("size", &kt::size);
  m.def("local_rank", &kt::local_rank);
  m.def("local_size", &kt::local_size);
  m.def("cross_rank", [] { return kolo::cross_rank(); });
  m.def("cross_size", [] { return kolo::cross_size(); });
  m.def("mark_step", [] { kt::check(kolo::mark_step()); });

  py::class_<kt::Handle>(m, "Handle")
      .def("poll", &kt::Handle::poll)
      .def("wait", &kt::Handle::wait, py::call_guard<py::gil_scoped_release>())
      .def("received_splits", &kt::Handle::received_splits);

  m.def(
      "allreduce_async_",
      [](const std::string& name, const at::Tensor& t, int op, double pre, double post) {
        return kt::allreduce_async_(name, t, reduction(op, pre, post));
      },
      py::arg("name"), py::arg("tensor"), py::arg("op"), py::arg("prescale") = 1.0,
      py::arg("postscale") = 1.0);
  m.def(
      "allreduce_async",
      [](const std::string& name, const at::Tensor& t, int op, double pre, double post) {
        return kt::allreduce_async(name, t, reduction(op, pre, post));
      },
      py::arg("name"), py::arg("tensor"), py::arg("op"), py::arg("prescale") = 1.0,
      py::arg("postscale") = 1.0);
  m.def(
      "grouped_allreduce_async_",
      [](const std::string& name, const std::vector<at::Tensor>& ts, int op, double pre,
         double post) { return kt::grouped_allreduce_async_(name, ts, reduction(op, pre, post)); },
      py::arg("name"), py::arg("tensors"), py::arg("op"), py::arg("prescale") = 1.0,
      py::arg("postscale") = 1.0);
  m.def(
      "grouped_allreduce_async",
      [](const std::string& name, const std::vector<at::Tensor>& ts, int op, double pre,
         double post) { return kt::grouped_allreduce_async(name, ts, reduction(op, pre, post)); },
      py::arg("name"), py::arg("tensors"), py::arg("op"), py::arg("prescale") = 1.0,
      py::arg("postscale") = 1.0);
  m.def("allgather_async", &kt::allgather_async);
  m.def("broadcast_async_", &kt::broadcast_async_);
  m.def("broadcast_async", &kt::broadcast_async);
  m.def("alltoall_async", &kt::alltoall_async);
  m.def(
      "reducescatter_async",
      [](const std::string& name, const at::Tensor& t, int op, double pre, double post) {
        return kt::reducescatter_async(name, t, reduction(op, pre, post));
      },
      py::arg("name"), py::arg("tensor"), py::arg("op"), py::arg("prescale") = 1.0,
      py::arg("postscale") = 1.0);
  m.def(
      "barrier", [](const std::string& name) { kt::barrier(name); },
      py::call_guard<py::gil_scoped_release>());
  m.def("join", &kt::join, py::call_guard<py::gil_scoped_release>());
}
