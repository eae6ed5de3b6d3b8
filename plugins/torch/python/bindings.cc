// kolo.torch._kolo_torch: the C++ plugin's collectives, process sets and GradientReducer
// (kolo/torch.h) for Python. The Horovod-style API (names, handles as integers,
// DistributedOptimizer, ProcessSet, elastic) is Python, in kolo/torch/. Waits release the GIL;
// errors become kolo.torch.KoloError (a RuntimeError) carrying Kolo's message, or one of its
// subclasses: the two elastic ones and InvalidArgumentError, also a ValueError (bind_errors).
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <optional>

#include "kolo/elastic.h"
#include "kolo/torch.h"

namespace py = pybind11;
namespace kt = kolo::torch;

namespace {

kolo::ReduceOp reduce_op(int op) {
  if (!kolo::is_valid_reduce_op(op)) {
    throw kt::Error(kolo::Status::InvalidArgument("unknown reduce op " + std::to_string(op)));
  }
  return static_cast<kolo::ReduceOp>(op);
}

kolo::AllreduceOptions reduction(int op, double prescale, double postscale,
                                 const kolo::ProcessSet& process_set) {
  return {.reduction = {.op = reduce_op(op), .prescale = prescale, .postscale = postscale},
          .process_set = process_set};
}

// A GradientReducer::NoSync as a Python context manager (held by pointer: NoSync does not
// move).
struct NoSyncScope {
  kt::GradientReducer& reducer;
  std::optional<kt::GradientReducer::NoSync> guard;
};

// Tags for py::exception: one C++ type per Python class.
struct WorldBrokeTag {};
struct WorldChangedTag {};

// kolo::torch::Error becomes kolo.torch.KoloError, a RuntimeError carrying Kolo's message, or
// one of the two subclasses that horovod.torch.elastic.run answers, under Horovod's names
// (kolo/torch/elastic): HostsUpdatedInterrupt for WorldChanged (the launcher has ranks to
// add), HorovodInternalError for a failure that broke the world (kolo::elastic::is_world_change:
// PeerFailure, and any failure once this rank's Kolo stopped because a peer was lost). Both are
// KoloErrors, so code that catches KoloError still catches a lost peer, as it did before.
void bind_errors(py::module_& m) {
  static py::exception<kt::Error> error(m, "KoloError", PyExc_RuntimeError);
  static py::exception<WorldBrokeTag> world_broke(m, "HorovodInternalError", error.ptr());
  static py::exception<WorldChangedTag> world_changed(m, "HostsUpdatedInterrupt", error.ptr());
  // A bad argument (StatusCode::kInvalidArgument: a split that does not fit, a length that does
  // not divide) is also a ValueError, the class horovod.torch raises for it; still a KoloError.
  static py::handle invalid_argument = [&] {
    py::tuple bases = py::make_tuple(py::handle(error.ptr()), py::handle(PyExc_ValueError));
    PyObject* type = PyErr_NewException("kolo.torch.InvalidArgumentError", bases.ptr(), nullptr);
    if (type == nullptr) throw py::error_already_set();
    m.add_object("InvalidArgumentError", py::handle(type));
    return py::handle(type);
  }();
  // Horovod's HostsUpdatedInterrupt(skip_sync): Kolo always syncs after a world change (the
  // added ranks need the state), so a raised one says False.
  world_changed.attr("skip_sync") = false;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kt::Error& e) {
      const kolo::Status& st = e.status();
      PyObject* type = error.ptr();
      if (st.code() == kolo::StatusCode::kWorldChanged) {
        type = world_changed.ptr();
      } else if (kolo::elastic::is_world_change(st)) {
        type = world_broke.ptr();
      } else if (st.code() == kolo::StatusCode::kInvalidArgument) {
        type = invalid_argument.ptr();
      }
      PyErr_SetString(type, e.what());
    }
  });
}

// kolo/elastic.h's world functions (the State itself is Python's: kolo/torch/elastic/state.py).
void bind_elastic(py::module_& m) {
  m.def("elastic_enabled", &kolo::elastic::enabled);
  m.def("elastic_generation", &kolo::elastic::generation);
  m.def("elastic_reset_limit", &kolo::elastic::reset_limit);
  m.def(
      "elastic_check_world", [] { kt::check(kolo::elastic::check_world()); },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "elastic_reform", [] { kt::check(kolo::elastic::reform()); },
      py::call_guard<py::gil_scoped_release>());
}

// The reduce ops as integers, init/shutdown and the topology queries.
void bind_lifecycle(py::module_& m) {
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
  // What this build has (coordinator/build_queries.cc): horovod.torch's *_built() queries.
  m.def("built", [](const std::string& backend) { return kolo::built(backend); });
  m.def("built_backend_names", &kolo::built_backend_names);
  m.attr("NCCL_VERSION_CODE") = KOLO_NCCL_VERSION_CODE;  // 0 without NCCL (plugin's CMakeLists)
  m.def("mpi_threads_supported", &kolo::mpi_threads_supported);
  m.def("start_timeline", [](const std::string& path, std::optional<bool> mark_cycles) {
    kt::check(kolo::start_timeline(path, mark_cycles));
  });
  m.def("stop_timeline", [] { kt::check(kolo::stop_timeline()); });
}

void bind_process_sets(py::module_& m) {
  py::class_<kolo::ProcessSet>(m, "ProcessSet")
      .def("id", &kolo::ProcessSet::id)
      .def("ranks", &kolo::ProcessSet::ranks)
      .def("size", &kolo::ProcessSet::size)
      .def("rank", &kolo::ProcessSet::rank)
      .def("includes", &kolo::ProcessSet::includes)
      .def("__repr__", &kolo::ProcessSet::to_string);
  m.def(
      "add_process_set",
      [](std::vector<int> ranks) {
        kolo::Result<kolo::ProcessSet> set = kolo::add_process_set(std::move(ranks));
        kt::check(set.status());
        return set.value();
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "remove_process_set",
      [](const kolo::ProcessSet& set) { kt::check(kolo::remove_process_set(set)); },
      py::call_guard<py::gil_scoped_release>());
  m.def("global_process_set", &kolo::global_process_set);
  m.def("process_sets", &kolo::process_sets);
}

// The Handle and the collectives: every argument positional, the process set last
// (kolo/torch/__init__.py resolves horovod's defaults).
void bind_collectives(py::module_& m) {
  py::class_<kt::Handle>(m, "Handle")
      .def("poll", &kt::Handle::poll)
      .def("wait", &kt::Handle::wait, py::call_guard<py::gil_scoped_release>())
      .def("received_splits", &kt::Handle::received_splits);

  m.def("allreduce_async_", [](const std::string& name, const at::Tensor& t, int op, double pre,
                               double post, const kolo::ProcessSet& ps) {
    return kt::allreduce_async_(name, t, reduction(op, pre, post, ps));
  });
  m.def("allreduce_async", [](const std::string& name, const at::Tensor& t, int op, double pre,
                              double post, const kolo::ProcessSet& ps) {
    return kt::allreduce_async(name, t, reduction(op, pre, post, ps));
  });
  m.def("grouped_allreduce_async_",
        [](const std::string& name, const std::vector<at::Tensor>& ts, int op, double pre,
           double post, const kolo::ProcessSet& ps) {
          return kt::grouped_allreduce_async_(name, ts, reduction(op, pre, post, ps));
        });
  m.def("grouped_allreduce_async", [](const std::string& name, const std::vector<at::Tensor>& ts,
                                      int op, double pre, double post, const kolo::ProcessSet& ps) {
    return kt::grouped_allreduce_async(name, ts, reduction(op, pre, post, ps));
  });
  m.def("allgather_async", &kt::allgather_async);
  m.def("broadcast_async_", &kt::broadcast_async_);
  m.def("broadcast_async", &kt::broadcast_async);
  m.def("alltoall_async", &kt::alltoall_async);
  m.def("reducescatter_async", [](const std::string& name, const at::Tensor& t, int op, double pre,
                                  double post, const kolo::ProcessSet& ps) {
    return kt::reducescatter_async(name, t, reduction(op, pre, post, ps));
  });
  m.def(
      "barrier", [](const std::string& name, const kolo::ProcessSet& ps) { kt::barrier(name, ps); },
      py::call_guard<py::gil_scoped_release>());
  m.def("join", &kt::join, py::call_guard<py::gil_scoped_release>());
}

// GradientReducer's constructor as Python calls it: the options as plain arguments, the
// parameters as (name, tensor) pairs, the enums as integers (checked here).
std::unique_ptr<kt::GradientReducer> make_gradient_reducer(
    const std::vector<std::pair<std::string, at::Tensor>>& named_parameters,
    int backward_passes_per_step, int compression, bool weight_by_sample_count, int op,
    bool mean_over_passes, double gradient_predivide_factor, int64_t bucket_bytes,
    const kolo::ProcessSet& process_set) {
  ::torch::OrderedDict<std::string, at::Tensor> params;
  for (const auto& [name, tensor] : named_parameters) params.insert(name, tensor);
  kt::DistributedOptions options;
  options.backward_passes_per_step = backward_passes_per_step;
  if (compression < 0 || compression > static_cast<int>(kt::Compression::kBFloat16)) {
    throw kt::Error(
        kolo::Status::InvalidArgument("unknown compression " + std::to_string(compression)));
  }
  options.compression = static_cast<kt::Compression>(compression);
  options.weight_by_sample_count = weight_by_sample_count;
  options.op = reduce_op(op);
  options.mean_over_passes = mean_over_passes;
  options.gradient_predivide_factor = gradient_predivide_factor;
  options.bucket_bytes = bucket_bytes;
  options.process_set = process_set;
  return std::make_unique<kt::GradientReducer>(params, std::move(options));
}

// The Python DistributedOptimizer's communication: hooks, buckets and averaging in C++, so
// that a step costs Python one synchronize() call, not one call per parameter.
void bind_gradient_reducer(py::module_& m) {
  py::class_<kt::GradientReducer>(m, "GradientReducer")
      .def(py::init(&make_gradient_reducer), py::arg("named_parameters"),
           py::arg("backward_passes_per_step"), py::arg("compression"),
           py::arg("weight_by_sample_count"), py::arg("op"), py::arg("mean_over_passes"),
           py::arg("gradient_predivide_factor"), py::arg("bucket_bytes"), py::arg("process_set"))
      .def("set_local_batch_size", &kt::GradientReducer::set_local_batch_size)
      .def("synchronize", &kt::GradientReducer::synchronize,
           py::call_guard<py::gil_scoped_release>())
      .def("mark_step", &kt::GradientReducer::mark_step)
      .def("pending", &kt::GradientReducer::pending)
      .def("abandon_step", &kt::GradientReducer::abandon_step)
      .def("stats",
           [](const kt::GradientReducer& r) {
             const kt::DistributedStats& s = r.stats();
             py::dict d;
             d["steps"] = s.steps;
             d["submitted_from_hooks"] = s.submitted_from_hooks;
             d["submitted_at_step"] = s.submitted_at_step;
             d["allreduces"] = s.allreduces;
             return d;
           })
      .def("submitted_handles", &kt::GradientReducer::submitted_handles)
      .def("bucket_names", &kt::GradientReducer::bucket_names)
      .def(
          "no_sync",
          [](kt::GradientReducer& r) {
            return std::unique_ptr<NoSyncScope>(new NoSyncScope{r, std::nullopt});
          },
          py::keep_alive<0, 1>());
  py::class_<NoSyncScope>(m, "NoSync")
      .def("__enter__", [](NoSyncScope& s) { s.guard.emplace(s.reducer); })
      .def("__exit__", [](NoSyncScope& s, const py::args&) { s.guard.reset(); });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  bind_errors(m);
  bind_lifecycle(m);
  bind_process_sets(m);
  bind_collectives(m);
  bind_gradient_reducer(m);
  bind_elastic(m);
}
