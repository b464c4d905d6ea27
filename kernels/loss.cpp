#include "kernels/loss.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace zerolens::kernels {

namespace {

void check_targets(const int* targets, std::size_t rows, std::size_t vocab_size) {
  for (std::size_t row = 0; row < rows; ++row)
    if (targets[row] < 0 || std::size_t(targets[row]) >= vocab_size)
      throw std::out_of_range("cross-entropy: target " + std::to_string(targets[row]) + " at row " +
                              std::to_string(row) + " is outside the vocabulary of " +
                              std::to_string(vocab_size));
}

}  // namespace

void crossentropy_softmax_forward(float* losses, float* probs, const float* logits,
                                  const int* targets, std::size_t rows, std::size_t vocab_size) {
  check_targets(targets, rows, vocab_size);
#pragma omp parallel for schedule(static) if (rows * vocab_size > 65536)
  for (std::size_t row = 0; row < rows; ++row) {
    const float* logit_row = logits + row * vocab_size;
    float* prob_row = probs + row * vocab_size;
    float max_logit = logit_row[0];
    for (std::size_t v = 1; v < vocab_size; ++v)
      if (logit_row[v] > max_logit) max_logit = logit_row[v];
    // Shifting by the maximum keeps exp in range; the sum is in double over up to ~50k terms.
    double exp_sum = 0.0;
    for (std::size_t v = 0; v < vocab_size; ++v) {
      prob_row[v] = std::exp(logit_row[v] - max_logit);
      exp_sum += prob_row[v];
    }
    const auto inv_sum = float(1.0 / exp_sum);
    for (std::size_t v = 0; v < vocab_size; ++v) prob_row[v] *= inv_sum;
    const float target_logit = logit_row[std::size_t(targets[row])];
    losses[row] = float(std::log(exp_sum) - (double(target_logit) - double(max_logit)));
  }
}

void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                   const int* targets, std::size_t rows, std::size_t vocab_size) {
  check_targets(targets, rows, vocab_size);
#pragma omp parallel for schedule(static) if (rows * vocab_size > 65536)
  for (std::size_t row = 0; row < rows; ++row) {
    const float* prob_row = probs + row * vocab_size;
    float* dlogit_row = dlogits + row * vocab_size;
    const float dloss = dlosses[row];
    const auto target = std::size_t(targets[row]);
    for (std::size_t v = 0; v < vocab_size; ++v) {
      const float indicator = v == target ? 1.0f : 0.0f;
      dlogit_row[v] += (prob_row[v] - indicator) * dloss;
    }
  }
}

void crossentropy_shard_max(float* row_max, const float* logits, std::size_t rows,
                            std::size_t shard, std::size_t valid) {
  for (std::size_t row = 0; row < rows; ++row) {
    const float* logit_row = logits + row * shard;
    float largest = -std::numeric_limits<float>::infinity();
    for (std::size_t v = 0; v < valid; ++v) largest = std::max(largest, logit_row[v]);
    row_max[row] = largest;
  }
}

void crossentropy_shard_sums(float* exp_sums, float* target_logits, float* exps,
                             const float* logits, const float* row_max, const int* targets,
                             std::size_t first_token, std::size_t rows, std::size_t shard,
                             std::size_t valid) {
  for (std::size_t row = 0; row < rows; ++row) {
    if (targets[row] < 0)
      throw std::out_of_range("cross-entropy: negative target at row " + std::to_string(row));
    const float* logit_row = logits + row * shard;
    float* exp_row = exps + row * shard;
    double sum = 0.0;
    for (std::size_t v = 0; v < shard; ++v) {
      exp_row[v] = v < valid ? std::exp(logit_row[v] - row_max[row]) : 0.0f;
      sum += exp_row[v];
    }
    exp_sums[row] = float(sum);
    const auto target = std::size_t(targets[row]);
    const bool here = target >= first_token && target - first_token < valid;
    target_logits[row] = here ? logit_row[target - first_token] : 0.0f;
  }
}

void crossentropy_shard_finish(float* losses, float* probs, const float* exp_sums,
                               const float* row_max, const float* target_logits, std::size_t rows,
                               std::size_t shard) {
  for (std::size_t row = 0; row < rows; ++row) {
    const auto inv_sum = float(1.0 / double(exp_sums[row]));
    for (std::size_t v = 0; v < shard; ++v) probs[row * shard + v] *= inv_sum;
    losses[row] = float(std::log(double(exp_sums[row])) -
                        (double(target_logits[row]) - double(row_max[row])));
  }
}

void crossentropy_shard_backward(float* dlogits, const float* dlosses, const float* probs,
                                 const int* targets, std::size_t first_token, std::size_t rows,
                                 std::size_t shard) {
  for (std::size_t row = 0; row < rows; ++row) {
    const float dloss = dlosses[row];
    const auto target = std::size_t(targets[row]);
    for (std::size_t v = 0; v < shard; ++v) {
      const float indicator = first_token + v == target ? 1.0f : 0.0f;
      dlogits[row * shard + v] += (probs[row * shard + v] - indicator) * dloss;
    }
  }
}

}  // namespace zerolens::kernels
