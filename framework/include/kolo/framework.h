// Kolo's training stack in one include: everything a data-parallel training program needs, on
// top of the core API (kolo/kolo.h, which it includes). Link Kolo::framework (CMake) or
// `pkg-config --cflags --libs kolo-framework`; docs/first-program.md builds a program from it.
//
//   #include <kolo/framework.h>
//   namespace fw = kolo::fw;
//   kolo::init();
//   fw::broadcast_parameters(model.named_parameters());        // every rank starts as rank 0
//   fw::SGD sgd(model.parameters(), {.lr = 0.1});
//   fw::DistributedOptimizer opt(sgd, model.named_parameters());  // averages the gradients
//
// What each part holds, with its contracts in its own header (each also includable alone):
//   framework/tensor.h        Tensor (from_vector, from_labels, randn, ...), Generator, Device
//   framework/memory_stats.h  bytes held per category (parameters, gradients, optimizer state,
//                             communication), current and peak
//   framework/autograd.h      backward, NoGradGuard, gradient-ready hooks
//   framework/functional.h    differentiable operations: matmul, relu, cross_entropy, ...
//   framework/cuda_graph.h    CudaGraph: a training step captured once, replayed as one launch
//   framework/nn/             Module, Sequential, Linear, Conv2d, pooling, BatchNorm, losses
//   framework/optim/          SGD, Adam/AdamW, LARS, learning-rate scaling and schedules,
//                             checkpoints (save_checkpoint, load_checkpoint)
//   framework/data/           Dataset, ImageDataset, load_mnist, load_cifar10, DataLoader,
//                             samplers
//   framework/distributed/    DistributedOptimizer, DistributedSampler, broadcast_parameters,
//                             checkpoints on rank 0, RankLogger, run_on_root_first,
//                             SyncBatchNorm, view_of_tensor (a Tensor as a kolo::TensorView),
//                             ElasticSampler (elastic training), ShardedOptimizer and its
//                             sharded checkpoints (ZeRO stages 1 and 2)
#pragma once

#include "framework/autograd.h"
#include "framework/cuda_graph.h"
#include "framework/data/cifar_reader.h"
#include "framework/data/data_loader.h"
#include "framework/data/dataset.h"
#include "framework/data/idx_reader.h"
#include "framework/data/sampler.h"
#include "framework/distributed/broadcast_state.h"
#include "framework/distributed/deterministic_kernels.h"
#include "framework/distributed/distributed_optimizer.h"
#include "framework/distributed/distributed_sampler.h"
#include "framework/distributed/elastic_sampler.h"
#include "framework/distributed/rank_zero.h"
#include "framework/distributed/sharded_checkpoint.h"
#include "framework/distributed/sharded_optimizer.h"
#include "framework/distributed/sync_batch_norm.h"
#include "framework/distributed/tensor_view.h"
#include "framework/functional.h"
#include "framework/memory_stats.h"
#include "framework/nn/layers.h"
#include "framework/nn/losses.h"
#include "framework/nn/module.h"
#include "framework/optim/adam.h"
#include "framework/optim/lars.h"
#include "framework/optim/lr_scaling.h"
#include "framework/optim/lr_schedule.h"
#include "framework/optim/optimizer.h"
#include "framework/optim/serialize.h"
#include "framework/optim/sgd.h"
#include "framework/tensor.h"
#include "kolo/kolo.h"
