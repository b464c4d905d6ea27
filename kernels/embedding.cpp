#include "kernels/embedding.hpp"

#include <stdexcept>
#include <string>

namespace zerolens::kernels {

namespace {

// A bad token id would read or write outside the embedding table; refuse it up front.
void check_tokens(const int* tokens, std::size_t count, std::size_t vocab_size) {
  for (std::size_t i = 0; i < count; ++i)
    if (tokens[i] < 0 || std::size_t(tokens[i]) >= vocab_size)
      throw std::out_of_range("encoder: token " + std::to_string(tokens[i]) + " at position " +
                              std::to_string(i) + " is outside the vocabulary of " +
                              std::to_string(vocab_size));
}

}  // namespace

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe,
                     std::size_t batch, std::size_t seq_len, std::size_t channels,
                     std::size_t vocab_size) {
  check_tokens(tokens, batch * seq_len, vocab_size);
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t t = 0; t < seq_len; ++t) {
      const std::size_t position = b * seq_len + t;
      const float* token_row = wte + std::size_t(tokens[position]) * channels;
      const float* position_row = wpe + t * channels;
      float* out_row = out + position * channels;
      for (std::size_t c = 0; c < channels; ++c) out_row[c] = token_row[c] + position_row[c];
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens,
                      std::size_t batch, std::size_t seq_len, std::size_t channels,
                      std::size_t vocab_size) {
  check_tokens(tokens, batch * seq_len, vocab_size);
  // Serial: several positions may carry the same token and add into the same dwte row.
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t t = 0; t < seq_len; ++t) {
      const std::size_t position = b * seq_len + t;
      float* token_grad = dwte + std::size_t(tokens[position]) * channels;
      float* position_grad = dwpe + t * channels;
      const float* dout_row = dout + position * channels;
      for (std::size_t c = 0; c < channels; ++c) {
        token_grad[c] += dout_row[c];
        position_grad[c] += dout_row[c];
      }
    }
}

}  // namespace zerolens::kernels
