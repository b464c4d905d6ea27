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

namespace {

// The table row of `token`, or nullptr when another part of the vocabulary holds it.
template <typename T>
T* range_row(T* table, int token, std::size_t first_token, std::size_t table_rows,
             std::size_t channels) {
  if (token < 0) throw std::out_of_range("embedding: negative token " + std::to_string(token));
  const auto row = std::size_t(token);
  if (row < first_token || row - first_token >= table_rows) return nullptr;
  return table + (row - first_token) * channels;
}

}  // namespace

void embedding_range_forward(float* out, const int* tokens, std::size_t count, const float* table,
                             std::size_t first_token, std::size_t table_rows,
                             std::size_t channels) {
  for (std::size_t i = 0; i < count; ++i) {
    const float* row = range_row(table, tokens[i], first_token, table_rows, channels);
    float* out_row = out + i * channels;
    for (std::size_t c = 0; c < channels; ++c) out_row[c] = row != nullptr ? row[c] : 0.0f;
  }
}

void embedding_range_backward(float* dtable, const float* dout, const int* tokens,
                              std::size_t count, std::size_t first_token, std::size_t table_rows,
                              std::size_t channels) {
  for (std::size_t i = 0; i < count; ++i) {
    float* row = range_row(dtable, tokens[i], first_token, table_rows, channels);
    if (row == nullptr) continue;
    const float* dout_row = dout + i * channels;
    for (std::size_t c = 0; c < channels; ++c) row[c] += dout_row[c];
  }
}

void position_forward(float* out, const float* wpe, std::size_t first_row, std::size_t rows,
                      std::size_t seq_len, std::size_t channels) {
  for (std::size_t i = 0; i < rows; ++i) {
    const float* position = wpe + (first_row + i) % seq_len * channels;
    for (std::size_t c = 0; c < channels; ++c) out[i * channels + c] += position[c];
  }
}

void position_backward(float* dwpe, const float* dout, std::size_t first_row, std::size_t rows,
                       std::size_t seq_len, std::size_t channels) {
  for (std::size_t i = 0; i < rows; ++i) {
    float* position = dwpe + (first_row + i) % seq_len * channels;
    for (std::size_t c = 0; c < channels; ++c) position[c] += dout[i * channels + c];
  }
}

}  // namespace zerolens::kernels
