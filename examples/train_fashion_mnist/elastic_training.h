// train_fashion_mnist --elastic: the training loop inside kolo::elastic::run() (Note [Elastic
// training loop] in elastic_training.cc; docs/elastic.md, "The training stack").
#pragma once

#include "examples/train_fashion_mnist/train_args.h"

namespace kolo::example {

// Joins the job, trains every epoch, reports and leaves the job; returns the exit code (0, or 1
// below --min-accuracy). Errors: kolo::Error with the failure that ended the job (run()'s: a
// world change beyond the reset limit or below kolorun's --min-np, or any other failure), or
// Unsupported for a CUDA device (the elastic State holds CPU tensors). Call it once per process,
// as train().
int train_elastic(const TrainArgs& args);

}  // namespace kolo::example
