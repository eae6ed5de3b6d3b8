#include "bench/mpi_support.h"

#include <mpi.h>

#include "backends/mpi/mpi_runtime.h"
#include "backends/mpi/mpi_types.h"
#include "backends/mpi/mpi_world.h"

namespace kolo::bench {

namespace {

class RawMpiImpl final : public RawMpi {
 public:
  explicit RawMpiImpl(MPI_Comm comm) : comm_(comm) {}
  ~RawMpiImpl() override {
    if (!mpi_finalized()) MPI_Comm_free(&comm_);
  }

  Status run(const BenchCase& c) override {
    KOLO_ASSIGN_OR_RETURN(MPI_Datatype type, mpi_datatype(c.dtype));
    KOLO_ASSIGN_OR_RETURN(MPI_Op op, mpi_op(c.dtype, c.op));
    const int count = static_cast<int>(c.count);
    const int block = static_cast<int>(c.block);
    int rc = MPI_SUCCESS;
    switch (c.collective) {
      case Collective::kAllreduce:
        rc = MPI_Allreduce(c.input, c.output, count, type, op, comm_);
        break;
      case Collective::kAllgather:
        rc = MPI_Allgather(c.input, block, type, c.output, block, type, comm_);
        break;
      case Collective::kBroadcast:
        rc = MPI_Bcast(c.output, count, type, 0, comm_);
        break;
      case Collective::kAlltoall:
        rc = MPI_Alltoall(c.input, block, type, c.output, block, type, comm_);
        break;
      case Collective::kReducescatter:
        rc = MPI_Reduce_scatter_block(c.input, c.output, block, type, op, comm_);
        break;
    }
    return mpi_status(rc, std::string("raw MPI ") + collective_name(c.collective));
  }

  Status barrier() override { return mpi_status(MPI_Barrier(comm_), "raw MPI_Barrier"); }

  Result<double> max_over_ranks(double value) override {
    double result = 0;
    KOLO_RETURN_IF_ERROR(mpi_status(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, comm_),
                                    "raw MPI_Allreduce"));
    return result;
  }

 private:
  MPI_Comm comm_;
};

}  // namespace

std::unique_ptr<RawMpi> make_raw_mpi() {
  if (!launched_by_mpirun() || !ensure_mpi().ok()) return nullptr;
  MPI_Comm comm = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS) return nullptr;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::make_unique<RawMpiImpl>(comm);
}

}  // namespace kolo::bench
