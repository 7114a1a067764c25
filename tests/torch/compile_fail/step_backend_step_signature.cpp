// expect: runhooks::TorchStepBackend: the step function cannot be called with the model
// first-error: runhooks::TorchStepBackend: the step function cannot be called with the model
// max-lines: 8
// A step written for the batch instead of the model (the model is what the backend passes):
// one static_assert naming the backend and what to write, not errors from inside run().
#include <runhooks/torch/step_backend.hpp>

#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <memory>

int main() {
  torch::nn::Linear model(4, 2);
  auto step = [](const torch::Tensor& batch) { return batch.sum(); };
  runhooks::TorchStepBackend backend{
      model, std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1)),
      step};
  backend.run();
  backend.save("x");
}
