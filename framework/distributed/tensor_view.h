// The bridge from the training stack to Kolo's core API: a kolo::TensorView over a Tensor's
// memory (borrowed: the Tensor must outlive the operation that uses the view).
#pragma once

#include "framework/tensor.h"
#include "kolo/tensor.h"

namespace kolo::fw {

inline TensorView view_of_tensor(const Tensor& tensor) {
  TensorView view;
  view.data = tensor.raw_data();
  view.shape = tensor.shape();
  view.dtype = tensor.dtype();
  view.device = tensor.device();
  return view;
}

}  // namespace kolo::fw
