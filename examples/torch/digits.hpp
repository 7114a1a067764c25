// What train_digits and train_digits_ddp share: the 8x8 digits (scikit-learn's digits.csv.gz,
// read through zlib), their fixed split, the MLP, and the strict command line of both.
#pragma once

#include <runhooks/torch/tensor_batches.hpp>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace digits {

constexpr std::int64_t num_pixels = 64;  // 8x8, each 0..16
constexpr std::int64_t num_classes = 10;
constexpr std::int64_t num_images = 1797;
constexpr std::int64_t held_out_every = 5;  // rows 4, 9, 14, ... of the file: 359 images, 20 %
constexpr std::int64_t batch_size = 32;     // the global batch, whatever the number of ranks

// The options both programs take; each has its own defaults and may add its own options.
struct Options {
  std::string data;
  // Checkpoints and TensorBoard event files, as TensorFlow's model_dir; empty: a new run
  // directory next to the executable (../run_directory.hpp).
  std::string model_dir;
  std::int64_t steps = 1500;
  std::int64_t save_steps = 500;
  std::uint64_t seed = 1;
  std::int64_t log_every = 250;
};

// The program's name in its error messages ("NAME: message; see NAME --help").
inline const char* program = "train_digits";

// Called with the line usage_error prints before it exits, when set (train_digits_ddp: into
// torchrun's error file, so that torchrun's report shows it).
inline void (*on_usage_error)(const std::string& line) = nullptr;

[[noreturn]] inline void usage_error(const std::string& message) {
  const std::string line = std::string(program) + ": " + message + "; see " + program + " --help";
  std::fprintf(stderr, "%s\n", line.c_str());
  if (on_usage_error != nullptr) on_usage_error(line);
  std::exit(2);
}

inline std::int64_t positive(std::string_view name, std::string_view text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value < 1)
    usage_error(std::string(name) + " must be a positive integer, got '" + std::string(text) + "'");
  return value;
}

// The command line: --help prints `usage` and exits 0; an unknown argument, a missing value or a
// bad one exits 2 naming it. `extra` lists the program's own options (each takes a value), which
// `take(option, value)` stores.
template <class Take>
Options parse(int argc, char** argv, const char* usage, std::initializer_list<std::string_view> extra,
              Take&& take, Options options = {}) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    const bool own = std::find(extra.begin(), extra.end(), arg) != extra.end();
    if (arg != "--data" && arg != "--model-dir" && arg != "--steps" && arg != "--save-steps" &&
        arg != "--seed" && arg != "--log-every" && !own)
      usage_error("unknown argument '" + std::string(arg) + "'");
    if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
    const std::string_view value = argv[++i];
    if (own) take(arg, value);
    else if (arg == "--data") options.data = value;
    else if (arg == "--model-dir") options.model_dir = value;
    else if (arg == "--steps") options.steps = positive(arg, value);
    else if (arg == "--save-steps") options.save_steps = positive(arg, value);
    else if (arg == "--seed") options.seed = static_cast<std::uint64_t>(positive(arg, value));
    else options.log_every = positive(arg, value);
  }
  if (options.data.empty()) usage_error("--data is required (tools/fetch_digits.py fetches it)");
  return options;
}

// The whole gzip file through zlib.
inline std::string read_gzip(const std::string& path) {
  const std::unique_ptr<gzFile_s, decltype(&gzclose)> file(gzopen(path.c_str(), "rb"), &gzclose);
  if (!file) throw std::runtime_error("cannot open " + path);
  std::string text;
  char buffer[1 << 16];
  for (int n; (n = gzread(file.get(), buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  int error = Z_OK;
  const char* message = gzerror(file.get(), &error);
  if (error != Z_OK && error != Z_STREAM_END)
    throw std::runtime_error("cannot read " + path + ": " + message);
  return text;
}

struct Digits {
  torch::Tensor images;  // [N, 64] float, pixels scaled to 0..1
  torch::Tensor labels;  // [N] int64
};

// scikit-learn's digits.csv.gz: one image per line, 64 pixel values then the label, no header.
inline Digits load_digits(const std::string& path) {
  const std::string text = read_gzip(path);
  std::vector<float> pixels;
  std::vector<std::int64_t> labels;
  pixels.reserve(num_images * num_pixels);
  std::size_t pos = 0;
  std::int64_t row = 0;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    ++row;
    std::vector<long> values;
    std::size_t field = 0;
    while (field <= line.size()) {
      const std::size_t comma = std::min(line.find(',', field), line.size());
      const std::string cell(line.substr(field, comma - field));
      char* cell_end = nullptr;
      const double value = std::strtod(cell.c_str(), &cell_end);
      if (cell.empty() || *cell_end != '\0' || value < 0 || value > 16 || value != std::floor(value))
        throw std::runtime_error(path + ": line " + std::to_string(row) + ": not an integer 0..16: '" + cell + "'");
      values.push_back(static_cast<long>(value));
      field = comma + 1;
    }
    if (values.size() != num_pixels + 1 || values.back() >= num_classes)
      throw std::runtime_error(path + ": line " + std::to_string(row) + ": expected 64 pixels and a label 0..9");
    for (std::int64_t j = 0; j < num_pixels; ++j) pixels.push_back(static_cast<float>(values[static_cast<std::size_t>(j)]) / 16.0f);
    labels.push_back(values.back());
  }
  if (row != num_images)
    throw std::runtime_error(path + ": expected " + std::to_string(num_images) + " images, found " + std::to_string(row));
  return {torch::tensor(pixels).reshape({num_images, num_pixels}), torch::tensor(labels, torch::kLong)};
}

// A fixed split: every fifth image held out, the others trained on.
struct Split {
  torch::Tensor train_images, train_labels, test_images, test_labels;
};
inline Split split(const Digits& all) {
  const torch::Tensor held_out = torch::arange(num_images).remainder(held_out_every) == held_out_every - 1;
  const torch::Tensor train_rows = held_out.logical_not().nonzero().squeeze(1);
  const torch::Tensor test_rows = held_out.nonzero().squeeze(1);
  return {all.images.index_select(0, train_rows), all.labels.index_select(0, train_rows),
          all.images.index_select(0, test_rows), all.labels.index_select(0, test_rows)};
}

// The batches of the training split: the global batch of 32, this rank's shard of it.
inline runhooks::TensorBatches train_batches(const Split& data, std::uint64_t seed,
                                             runhooks::TensorBatches::Shard shard = {}) {
  return runhooks::TensorBatches(data.train_images, data.train_labels, batch_size, seed, shard);
}

using Model = torch::nn::Sequential;

// The MLP, 64 -> 64 -> 10, its initial weights drawn from `seed`.
inline Model make_model(std::uint64_t seed) {
  torch::manual_seed(seed);
  return Model(torch::nn::Linear(num_pixels, 64), torch::nn::ReLU(),
               torch::nn::Linear(64, num_classes));
}

}  // namespace digits
