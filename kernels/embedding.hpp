#pragma once
// GPT-2 encoder: token embedding plus learned position embedding.
#include <cstddef>

namespace zerolens::kernels {

// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :] for tokens [B, T] (int32), wte [V, C], wpe [>= T,
// C]. `out` is overwritten. Throws std::out_of_range when a token is outside [0, vocab_size),
// before writing anything.
void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe,
                     std::size_t batch, std::size_t seq_len, std::size_t channels,
                     std::size_t vocab_size);

// ACCUMULATES (+=) dout [B, T, C] into the rows of dwte picked by the tokens (a token seen twice
// adds twice) and into dwpe[t] for every t < T. Throws std::out_of_range as encoder_forward does.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens,
                      std::size_t batch, std::size_t seq_len, std::size_t channels,
                      std::size_t vocab_size);

}  // namespace zerolens::kernels
