// Tiny Shakespeare for a character-level model, as nanoGPT's data/shakespeare_char prepares it:
// the text read and checked, its 65 characters sorted by code point as the vocabulary, the first
// 90 % of it for training and the rest for validation, and random batches drawn as nanoGPT's
// get_batch() draws them. Used by examples/torch/train_gpt.cpp and bench/.
//
//   const shakespeare::Text text = shakespeare::load(path);   // std::runtime_error naming path
//   shakespeare::Batches train(text.train, {.block_size = 64, .batch_size = 12});
//   auto [x, y] = train.draw();            // [12, 64] int64 each, y = x shifted by one
//   std::string s = text.vocabulary.decode(x[0]);
#pragma once

#include <torch/types.h>
#include <torch/utils.h>

#include <ATen/core/Generator.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace shakespeare {

// What the file must be (/work/shared/data/README.md, karpathy/char-rnn's
// data/tinyshakespeare/input.txt).
constexpr std::int64_t file_size = 1115394;
constexpr std::int64_t vocabulary_size = 65;
constexpr std::string_view sha256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed";
constexpr std::string_view source =
    "tiny Shakespeare is data/tinyshakespeare/input.txt of the public repository "
    "karpathy/char-rnn (1,115,394 bytes, sha256 "
    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed)";

// The characters of the text sorted by code point; a character's id is its place there.
class Vocabulary {
 public:
  explicit Vocabulary(std::string_view text) {
    std::array<bool, 256> seen{};
    for (const char c : text) seen[static_cast<unsigned char>(c)] = true;
    ids_.fill(-1);
    for (int c = 0; c < 256; ++c)
      if (seen[static_cast<std::size_t>(c)]) {
        ids_[static_cast<std::size_t>(c)] = static_cast<std::int16_t>(chars_.size());
        chars_ += static_cast<char>(c);
      }
  }
  std::int64_t size() const noexcept { return static_cast<std::int64_t>(chars_.size()); }
  const std::string& characters() const noexcept { return chars_; }

  // [N] int64; std::invalid_argument on a character the text does not hold.
  torch::Tensor encode(std::string_view s) const {
    torch::Tensor ids = torch::empty({static_cast<std::int64_t>(s.size())}, torch::kLong);
    std::int64_t* out = ids.data_ptr<std::int64_t>();
    for (const char c : s) {
      const std::int16_t id = ids_[static_cast<unsigned char>(c)];
      if (id < 0)
        throw std::invalid_argument("shakespeare: the character " +
                                    std::to_string(static_cast<unsigned char>(c)) +
                                    " is not in the vocabulary");
      *out++ = id;
    }
    return ids;
  }
  // Ids, of any shape (flattened), back to text; std::invalid_argument on an id out of range.
  std::string decode(const torch::Tensor& ids) const {
    const torch::Tensor flat = ids.to(torch::kCPU, torch::kLong).contiguous().view({-1});
    std::string s;
    s.reserve(static_cast<std::size_t>(flat.numel()));
    const std::int64_t* p = flat.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < flat.numel(); ++i) {
      if (p[i] < 0 || p[i] >= size())
        throw std::invalid_argument("shakespeare: id " + std::to_string(p[i]) +
                                    " is outside the vocabulary of " + std::to_string(size()));
      s += chars_[static_cast<std::size_t>(p[i])];
    }
    return s;
  }

 private:
  std::string chars_;
  std::array<std::int16_t, 256> ids_{};
};

struct Text {
  Vocabulary vocabulary;
  torch::Tensor train;  // [1,003,854] int64: the first 90 % of the characters
  torch::Tensor val;    // [111,540] int64: the rest
};

// Reads tiny Shakespeare from `path` and checks it: its size and its 65 distinct characters (a
// wrong file, or one with Windows line ends, fails here rather than training on it). Throws
// std::runtime_error naming the path and what is wrong, with where the file comes from.
inline Text load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string() + "; " + std::string(source));
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw std::runtime_error("cannot read " + path.string());
  const auto wrong = [&](const std::string& what) {
    return std::runtime_error(path.string() + " is not tiny Shakespeare: " + what + "; " +
                              std::string(source));
  };
  if (static_cast<std::int64_t>(text.size()) != file_size)
    throw wrong(std::to_string(text.size()) + " bytes, expected " + std::to_string(file_size));
  Vocabulary vocabulary(text);
  if (vocabulary.size() != vocabulary_size)
    throw wrong(std::to_string(vocabulary.size()) + " distinct characters, expected " +
                std::to_string(vocabulary_size));
  const torch::Tensor ids = vocabulary.encode(text);
  const std::int64_t n_train = file_size * 9 / 10;  // Python's int(n * 0.9): 1,003,854
  return {std::move(vocabulary), ids.narrow(0, 0, n_train).clone(),
          ids.narrow(0, n_train, file_size - n_train).clone()};
}

struct BatchOptions {
  std::int64_t block_size = 64;  // characters per row
  std::int64_t batch_size = 12;  // rows of the global batch, whatever the number of ranks
  // This rank's share of each global batch: rows [rank * b, (rank + 1) * b) with b =
  // batch_size / num_replicas (which must divide it).
  std::int64_t rank = 0;
  std::int64_t num_replicas = 1;
};

// nanoGPT's get_batch(): batch_size random offsets i in [0, len - block_size) from torch's
// generator, x = data[i : i + block_size] and y = data[i + 1 : i + 1 + block_size]. Every rank
// draws the whole global batch from the same generator state (the chief's, which every rank
// holds) and keeps its own rows, so the ranks together train on exactly the batch that one
// process would.
class Batches {
 public:
  Batches(torch::Tensor data, BatchOptions options, torch::Device device = torch::kCPU)
      : options_(checked(options, data)), data_(std::move(data).to(device)),
        local_(options_.batch_size / options_.num_replicas),
        positions_(torch::arange(options_.block_size, torch::kLong).to(device)) {}

  // From the generator given, or torch's default CPU generator (the one a checkpoint of the
  // backend saves).
  std::pair<torch::Tensor, torch::Tensor> draw(std::optional<at::Generator> generator = {}) const {
    torch::Tensor ix = torch::randint(data_.size(0) - options_.block_size, {options_.batch_size},
                                      generator, torch::kLong);
    if (options_.num_replicas > 1) ix = ix.narrow(0, options_.rank * local_, local_);
    // To a device as nanoGPT does: from pinned memory without waiting (a blocking copy would
    // end with a stream synchronisation on every step).
    if (!data_.device().is_cpu()) ix = ix.pin_memory().to(data_.device(), /*non_blocking=*/true);
    const torch::Tensor rows = ix.unsqueeze(1) + positions_;  // [b, T]
    return {data_.index({rows}), data_.index({rows + 1})};
  }

  const BatchOptions& options() const noexcept { return options_; }
  std::int64_t local_batch_size() const noexcept { return local_; }

 private:
  static BatchOptions checked(const BatchOptions& o, const torch::Tensor& data) {
    const auto bad = [](const char* field, std::int64_t value, const std::string& why) {
      throw std::invalid_argument(std::string("shakespeare::BatchOptions::") + field + " " + why +
                                  ", got " + std::to_string(value) + ".");
    };
    if (o.block_size < 1) bad("block_size", o.block_size, "must be at least 1");
    if (data.dim() != 1 || data.size(0) <= o.block_size)
      bad("block_size", o.block_size,
          "must be less than the characters of the split (" +
              std::to_string(data.dim() == 1 ? data.size(0) : 0) + ")");
    if (o.batch_size < 1) bad("batch_size", o.batch_size, "must be at least 1");
    if (o.num_replicas < 1 || o.batch_size % o.num_replicas != 0)
      bad("num_replicas", o.num_replicas,
          "must divide batch_size (" + std::to_string(o.batch_size) + ")");
    if (o.rank < 0 || o.rank >= o.num_replicas)
      bad("rank", o.rank, "must be at least 0 and below num_replicas");
    return o;
  }

  BatchOptions options_;
  torch::Tensor data_;
  std::int64_t local_;
  torch::Tensor positions_;
};

}  // namespace shakespeare
