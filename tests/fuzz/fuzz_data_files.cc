// The framework's readers of files a user points it at (framework/data, framework/optim):
// IDX (raw or gzip), CIFAR-10 batches and checkpoints. Bad bytes must end in kolo::Error; any
// other exception, a crash or a sanitizer report is a finding. The first byte picks the reader,
// so one corpus covers the three formats.
#include "framework/data/cifar_reader.h"
#include "framework/data/idx_reader.h"
#include "framework/optim/serialize.h"
#include "fuzz_input.h"
#include "kolo/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kolo;
  if (size == 0) return 0;
  const uint8_t reader = data[0] % 3;
  fuzz::MemoryFile file(data + 1, size - 1);
  try {
    if (reader == 0) {
      fw::IdxArray array = fw::read_idx(file.path());
      FUZZ_CHECK(array.data.size() ==
                 static_cast<size_t>(array.numel()) * fw::idx_type_size(array.type));
    } else if (reader == 1) {
      fw::CifarArray cifar = fw::read_cifar10(file.path());
      FUZZ_CHECK(cifar.labels.size() == static_cast<size_t>(cifar.count));
      for (uint8_t label : cifar.labels) FUZZ_CHECK(label < fw::kCifar10Classes);
    } else {
      (void)fw::load_tensors(file.path());
    }
  } catch (const Error&) {
    // A clean rejection.
  }
  return 0;
}
