// A character-level GPT written from nanoGPT's description (karpathy/nanoGPT, model.py): token
// and position embeddings, n_layer pre-LayerNorm blocks of causal self-attention and a 4x GELU
// MLP, a final LayerNorm, and the output projection tied to the token embedding; no biases
// anywhere (nanoGPT's bias=False). Used by examples/torch/train_gpt.cpp and bench/.
//
//   gpt::Config config;                        // nanoGPT's CPU configuration
//   gpt::GPT model(config, /*seed=*/1337);     // nanoGPT's initialisation, drawn from the seed
//   torch::Tensor loss = model->loss(x, y);    // x, y: [B, T] int64 character ids
//   torch::optim::AdamW opt(gpt::adamw_param_groups(*model, 0.1), options);
//   torch::Tensor text = model->generate(prompt, 200, generator);
//
// What differs from nanoGPT, and why: the tied weight is one parameter (named wte.weight), and
// the output projection reads it through F::linear; libtorch's Module lists a tensor registered
// under two names twice, so an lm_head sharing it would be updated twice by the optimizer and
// saved twice. The initial weights are drawn in a fixed order of our own (not torch's module
// traversal in Python), so they are nanoGPT's distribution, not its numbers.
#pragma once

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/dropout.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/normalization.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/adamw.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace gpt {

// The model's sizes. The defaults are nanoGPT's CPU configuration for tiny Shakespeare
// (README: block 64, 4 layers, 4 heads, 128 embedding, dropout 0), with its 65 characters.
struct Config {
  std::int64_t block_size = 64;  // the longest context, in characters
  std::int64_t vocab_size = 65;
  std::int64_t n_layer = 4;
  std::int64_t n_head = 4;
  std::int64_t n_embd = 128;  // a multiple of n_head
  double dropout = 0.0;       // in [0, 1)

  // Throws std::invalid_argument naming the first field out of range and its value.
  const Config& validate() const {
    const auto bad = [](const char* field, const std::string& value, const char* why) {
      throw std::invalid_argument(std::string("gpt::Config::") + field + " " + why + ", got " +
                                  value + ".");
    };
    if (block_size < 1) bad("block_size", std::to_string(block_size), "must be at least 1");
    if (vocab_size < 1) bad("vocab_size", std::to_string(vocab_size), "must be at least 1");
    if (n_layer < 1) bad("n_layer", std::to_string(n_layer), "must be at least 1");
    if (n_head < 1) bad("n_head", std::to_string(n_head), "must be at least 1");
    if (n_embd < 1 || n_embd % n_head != 0)
      bad("n_embd", std::to_string(n_embd), "must be a positive multiple of n_head");
    if (!(dropout >= 0.0 && dropout < 1.0))
      bad("dropout", std::to_string(dropout), "must be at least 0 and below 1");
    return *this;
  }
};

// nanoGPT's LayerNorm(bias=False): a scale, no shift, eps 1e-5.
class LayerNormImpl : public torch::nn::Module {
 public:
  explicit LayerNormImpl(std::int64_t n) : n_(n) { weight = register_parameter("weight", torch::ones({n})); }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::layer_norm(x, {n_}, weight, /*bias=*/{}, 1e-5);
  }
  torch::Tensor weight;

 private:
  std::int64_t n_;
};
TORCH_MODULE(LayerNorm);

inline torch::nn::Linear linear(std::int64_t in, std::int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// Multi-head causal self-attention: one projection to queries, keys and values of every head,
// torch's scaled_dot_product_attention (is_causal), one output projection.
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const Config& c)
      : n_head_(c.n_head), n_embd_(c.n_embd), dropout_(c.dropout) {
    c_attn = register_module("c_attn", linear(c.n_embd, 3 * c.n_embd));
    c_proj = register_module("c_proj", linear(c.n_embd, c.n_embd));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const std::int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head_;
    const std::vector<torch::Tensor> qkv = c_attn(x).split(n_embd_, 2);
    // [B, T, C] -> [B, nh, T, hs]
    const auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head_, hs}).transpose(1, 2); };
    const double p = is_training() ? dropout_ : 0.0;
    torch::Tensor y = at::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                                       /*attn_mask=*/{}, p, /*is_causal=*/true);
    y = y.transpose(1, 2).contiguous().view({B, T, C});
    return dropout(c_proj(y));
  }
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};

 private:
  torch::Tensor dropout(const torch::Tensor& x) {
    return dropout_ > 0.0 && is_training() ? torch::dropout(x, dropout_, true) : x;
  }
  std::int64_t n_head_, n_embd_;
  double dropout_;
};
TORCH_MODULE(CausalSelfAttention);

// n_embd -> 4 n_embd -> GELU (exact, erf) -> n_embd.
class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const Config& c) : dropout_(c.dropout) {
    c_fc = register_module("c_fc", linear(c.n_embd, 4 * c.n_embd));
    c_proj = register_module("c_proj", linear(4 * c.n_embd, c.n_embd));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = c_proj(torch::gelu(c_fc(x)));
    return dropout_ > 0.0 && is_training() ? torch::dropout(y, dropout_, true) : y;
  }
  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(MLP);

// x + attn(ln_1(x)), then x + mlp(ln_2(x)).
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const Config& c) {
    ln_1 = register_module("ln_1", LayerNorm(c.n_embd));
    attn = register_module("attn", CausalSelfAttention(c));
    ln_2 = register_module("ln_2", LayerNorm(c.n_embd));
    mlp = register_module("mlp", MLP(c));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln_1(x));
    return x + mlp(ln_2(x));
  }
  LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  MLP mlp{nullptr};
};
TORCH_MODULE(Block);

class GPTImpl : public torch::nn::Module {
 public:
  // The initial weights are drawn from a generator seeded with `seed` (the global one is left
  // alone): every 2-D weight normal(0, 0.02), the residual projections (attn.c_proj and
  // mlp.c_proj) normal(0, 0.02 / sqrt(2 n_layer)) as in GPT-2's paper, the LayerNorm scales 1.
  GPTImpl(const Config& config, std::uint64_t seed) : config_(config.validate()) {
    wte = register_module("wte", torch::nn::Embedding(config_.vocab_size, config_.n_embd));
    wpe = register_module("wpe", torch::nn::Embedding(config_.block_size, config_.n_embd));
    h = register_module("h", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < config_.n_layer; ++i) {
      blocks_.push_back(Block(config_));
      h->push_back(blocks_.back());
    }
    ln_f = register_module("ln_f", LayerNorm(config_.n_embd));
    initialise(seed);
  }

  // The logits, [B, T, vocab], of idx, [B, T] int64 with T <= block_size.
  torch::Tensor forward(const torch::Tensor& idx) {
    const std::int64_t T = idx.size(1);
    if (T > config_.block_size)
      throw std::invalid_argument("gpt: a sequence of " + std::to_string(T) +
                                  " characters is longer than block_size " +
                                  std::to_string(config_.block_size));
    torch::Tensor x = wte(idx) + wpe->weight.narrow(0, 0, T);
    if (config_.dropout > 0.0 && is_training()) x = torch::dropout(x, config_.dropout, true);
    for (Block& block : blocks_) x = block(x);
    return torch::nn::functional::linear(ln_f(x), wte->weight);  // tied to the token embedding
  }

  // The mean cross-entropy of the next character: targets y, [B, T] int64.
  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& y) {
    const torch::Tensor logits = forward(x);
    return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), y.reshape({-1}));
  }

  // nanoGPT's generate(): extends idx ([B, T] int64) by `count` characters, each sampled from
  // softmax(logits / temperature) of the last block_size characters, restricted to the top_k
  // most likely when given, drawn from `generator` (a CPU generator). In evaluation mode and
  // without gradients; the mode is put back.
  torch::Tensor generate(torch::Tensor idx, std::int64_t count, at::Generator generator,
                         double temperature = 1.0, std::optional<std::int64_t> top_k = {}) {
    if (!(temperature > 0.0))
      throw std::invalid_argument("gpt: generate's temperature must be greater than 0, got " +
                                  std::to_string(temperature));
    const bool was_training = is_training();
    eval();
    torch::NoGradGuard no_grad;
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t T = idx.size(1);
      const torch::Tensor context =
          T <= config_.block_size ? idx : idx.narrow(1, T - config_.block_size, config_.block_size);
      torch::Tensor logits = forward(context).select(1, -1) / temperature;
      if (top_k) {
        const std::int64_t k = std::min(*top_k, logits.size(-1));
        const torch::Tensor kth = std::get<0>(logits.topk(k)).narrow(-1, k - 1, 1);
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
      }
      // Drawn on the host: `generator` is a CPU generator, which a CUDA tensor's multinomial
      // refuses (a synchronization per character on a GPU, where sampling is not the hot path).
      const torch::Tensor probabilities = torch::softmax(logits, -1).to(torch::kCPU);
      const torch::Tensor next = torch::multinomial(probabilities, 1, false, generator);
      idx = torch::cat({idx, next.to(idx.device())}, 1);
    }
    train(was_training);
    return idx;
  }

  // nanoGPT's get_num_params(): every parameter but the position embedding (the token
  // embedding counts, being also the output projection).
  std::int64_t num_params(bool non_embedding = true) const {
    std::int64_t n = 0;
    for (const torch::Tensor& p : parameters()) n += p.numel();
    return non_embedding ? n - wpe->weight.numel() : n;
  }

  // nanoGPT's estimate_mfu(), per token of a forward and backward pass: 6 N + 12 L H Q T (PaLM's
  // appendix B), N the parameters without the position embedding, Q = n_embd / n_head,
  // T = block_size.
  double flops_per_token() const {
    const double N = static_cast<double>(num_params()), L = static_cast<double>(config_.n_layer),
                 H = static_cast<double>(config_.n_head),
                 Q = static_cast<double>(config_.n_embd / config_.n_head),
                 T = static_cast<double>(config_.block_size);
    return 6.0 * N + 12.0 * L * H * Q * T;
  }

  const Config& config() const noexcept { return config_; }

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  LayerNorm ln_f{nullptr};

 private:
  void initialise(std::uint64_t seed) {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
    torch::NoGradGuard no_grad;
    for (const auto& item : named_parameters()) {
      const std::string& name = item.key();
      torch::Tensor p = item.value();
      if (p.dim() < 2) continue;  // the LayerNorm scales keep their ones
      const bool residual = name.size() >= 13 && name.compare(name.size() - 13, 13, "c_proj.weight") == 0;
      p.normal_(0.0, residual ? residual_std : 0.02, generator);
    }
  }

  Config config_;
  std::vector<Block> blocks_;
};
TORCH_MODULE(GPT);

// nanoGPT's configure_optimizers(): the parameters in two AdamW groups, every parameter of two
// or more dimensions (the matrices and embeddings) with weight decay `weight_decay`, the others
// (the LayerNorm scales) with none. The other settings are the optimizer's defaults:
//   torch::optim::AdamW opt(gpt::adamw_param_groups(*model, 0.1),
//                           torch::optim::AdamWOptions(1e-3).betas({0.9, 0.99}));
inline std::vector<torch::optim::OptimizerParamGroup> adamw_param_groups(
    const GPTImpl& model, double weight_decay, torch::optim::AdamWOptions base = {}) {
  if (!(weight_decay >= 0.0 && std::isfinite(weight_decay)))
    throw std::invalid_argument("gpt::adamw_param_groups: weight_decay must be finite and at least 0, got " +
                                std::to_string(weight_decay));
  std::vector<torch::Tensor> decay, no_decay;
  for (const torch::Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(decay), std::make_unique<torch::optim::AdamWOptions>(
                                            torch::optim::AdamWOptions(base).weight_decay(weight_decay)));
  groups.emplace_back(std::move(no_decay), std::make_unique<torch::optim::AdamWOptions>(
                                               torch::optim::AdamWOptions(base).weight_decay(0.0)));
  return groups;
}

}  // namespace gpt
