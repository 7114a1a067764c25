// TensorBatches: an in-memory data set served as shuffled mini-batches, where the batch of each
// step is a function of the seed and the step alone, so a run resumed from a checkpoint sees
// exactly the batches an uninterrupted run would have; optionally one rank's shard of each batch
// (PyTorch's DistributedSampler), so that data-parallel ranks train on disjoint rows.
#pragma once

#include <runhooks/detail/config.hpp>

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace runhooks {

// Rows of `inputs` (shape [N, ...]) with their `targets` (shape [N]), N >= batch_size >= 1.
// Every epoch visits the rows in a new order, drawn from (seed, epoch) by a Fisher-Yates shuffle
// on std::mt19937_64, so the order is the same with every compiler and standard library, and
// independent of torch's generators. The N % batch_size rows left over at the end of an
// epoch's order are skipped, so every batch has batch_size rows.
//
// Sharded (a Shard{rank, num_replicas}, DistributedSampler's names): batch_size is the global
// batch, which every rank draws alike (the batch the unsharded TensorBatches gives for the step,
// whatever the number of ranks), and rank r trains on its rows r*b .. (r+1)*b - 1, b =
// batch_size / num_replicas: disjoint shards that together are the global batch. batch_size
// must be a multiple of num_replicas (std::invalid_argument naming both otherwise). The default
// Shard{0, 1} is the whole batch.
//
// Cost: batch() is one index_select per tensor; the order is drawn once per epoch.
// One rank's part of every batch: DistributedSampler's rank and num_replicas.
struct TensorBatchesShard {
  std::int64_t rank = 0;
  std::int64_t num_replicas = 1;
};

class TensorBatches {
 public:
  using Shard = TensorBatchesShard;

  TensorBatches(torch::Tensor inputs, torch::Tensor targets, std::int64_t batch_size,
                std::uint64_t seed, Shard shard = {})
      : inputs_(std::move(inputs)), targets_(std::move(targets)), batch_size_(batch_size),
        seed_(seed), shard_(shard) {
    if (inputs_.dim() < 1 || targets_.dim() != 1 || inputs_.size(0) != targets_.size(0))
      throw std::invalid_argument(
          "runhooks::TensorBatches: inputs must be [N, ...] and targets [N] with the same N");
    if (batch_size_ < 1 || batch_size_ > inputs_.size(0))
      throw std::invalid_argument("runhooks::TensorBatches: batch_size must be 1 to N = " +
                                  std::to_string(inputs_.size(0)) + ", got " +
                                  std::to_string(batch_size_));
    if (shard_.num_replicas < 1 || shard_.rank < 0 || shard_.rank >= shard_.num_replicas)
      throw std::invalid_argument(
          "runhooks::TensorBatches: Shard::rank must be 0 to num_replicas - 1 and num_replicas at "
          "least 1, got rank " + std::to_string(shard_.rank) + " of num_replicas " +
          std::to_string(shard_.num_replicas));
    if (batch_size_ % shard_.num_replicas != 0)
      throw std::invalid_argument(
          "runhooks::TensorBatches: the global batch_size " + std::to_string(batch_size_) +
          " is not a multiple of the number of ranks (Shard::num_replicas) " +
          std::to_string(shard_.num_replicas) + ": every rank must train on as many rows");
  }

  std::int64_t size() const { return inputs_.size(0); }
  // The global batch: this rank's rows are local_batch_size() of them.
  std::int64_t batch_size() const noexcept { return batch_size_; }
  std::int64_t local_batch_size() const noexcept { return batch_size_ / shard_.num_replicas; }
  std::int64_t batches_per_epoch() const { return size() / batch_size_; }
  std::uint64_t seed() const noexcept { return seed_; }
  const Shard& shard() const noexcept { return shard_; }

  // Where step `step`'s global batch starts: the epoch, and the offset in that epoch's order.
  std::int64_t epoch_of(std::int64_t step) const { return step / batches_per_epoch(); }
  std::int64_t offset_of(std::int64_t step) const {
    return (step % batches_per_epoch()) * batch_size_;
  }

  // This rank's part of the batch that step `step` (0-based: the global step before it runs)
  // trains on: the whole batch unless sharded.
  std::pair<torch::Tensor, torch::Tensor> batch(std::int64_t step) {
    if (step < 0)
      throw std::invalid_argument("runhooks::TensorBatches: negative step " + std::to_string(step));
    const std::int64_t epoch = epoch_of(step);
    if (epoch != epoch_) shuffle(epoch);
    const std::int64_t local = local_batch_size();
    const torch::Tensor rows = order_.narrow(0, offset_of(step) + shard_.rank * local, local);
    return {inputs_.index_select(0, rows), targets_.index_select(0, rows)};
  }

  const torch::Tensor& inputs() const noexcept { return inputs_; }
  const torch::Tensor& targets() const noexcept { return targets_; }

 private:
  void shuffle(std::int64_t epoch) {
    std::seed_seq seq{static_cast<std::uint32_t>(seed_), static_cast<std::uint32_t>(seed_ >> 32),
                      static_cast<std::uint32_t>(epoch),
                      static_cast<std::uint32_t>(static_cast<std::uint64_t>(epoch) >> 32)};
    std::mt19937_64 rng(seq);
    const auto n = static_cast<std::size_t>(size());
    std::vector<std::int64_t> order(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::int64_t>(i);
    // rng() % (i + 1): its bias is below 2^-50 for any N that fits in memory.
    for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    order_ = torch::tensor(order, torch::kLong);
    epoch_ = epoch;
  }

  torch::Tensor inputs_;
  torch::Tensor targets_;
  std::int64_t batch_size_;
  std::uint64_t seed_;
  Shard shard_;
  std::int64_t epoch_ = -1;
  torch::Tensor order_;
};

}  // namespace runhooks
