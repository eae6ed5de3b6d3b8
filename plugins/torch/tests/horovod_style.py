"""A training script written against horovod.torch's documented API (the "Usage" steps of
Horovod's PyTorch guide), with only the import changed. Synthetic data keeps it short; the loss
must fall. Prints "[ok] horovod_style" on success."""
import sys

import torch
import torch.nn.functional as F
import torch.utils.data.distributed

import kolo.torch as hvd  # was: import horovod.torch as hvd

sys.stdout.reconfigure(line_buffering=True)
torch.set_num_threads(1)

# Initialize Horovod
hvd.init()
torch.manual_seed(42)

# A linearly separable problem, partitioned by rank with the DistributedSampler.
x = torch.randn(512, 20)
y = (x[:, :5].sum(dim=1) > 0).long()
train_dataset = torch.utils.data.TensorDataset(x, y)
train_sampler = torch.utils.data.distributed.DistributedSampler(
    train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=32, sampler=train_sampler)

model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))

# Scale the learning rate by the number of workers.
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)

# Broadcast parameters and optimizer state from rank 0 to all other processes.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

# Add Horovod Distributed Optimizer, with fp16 compression.
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=hvd.Compression.fp16, op=hvd.Average)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


first = None
for epoch in range(3):
    model.train()
    train_sampler.set_epoch(epoch)
    for data, target in train_loader:
        optimizer.zero_grad()
        output = model(data)
        loss = F.cross_entropy(output, target)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        test_loss = F.cross_entropy(model(x), y).item()
    test_loss = metric_average(test_loss, "avg_loss")
    first = test_loss if first is None else first
    if hvd.rank() == 0:
        print("epoch %d loss %.4f" % (epoch, test_loss))

# The replicas stayed identical, and training made progress.
w = model[0].weight.detach()
same = torch.equal(hvd.allreduce(w, op=hvd.Max, name="check.max"),
                   hvd.allreduce(w, op=hvd.Min, name="check.min"))
if same and test_loss < 0.5:
    print("[ok] horovod_style")
else:
    print("FAIL replicas identical=%s final loss %.4f" % (same, test_loss))
hvd.shutdown()
