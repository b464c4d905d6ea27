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

// A vocabulary-parallel embedding's part (Megatron's VocabParallelEmbedding): `table` holds rows
// first_token .. first_token + table_rows - 1 of the token embedding; out[i, :] is the row of
// tokens[i] when it is among them and zero otherwise (the tensor-parallel group's sum is the
// lookup). `out` [count, C] is overwritten.
void embedding_range_forward(float* out, const int* tokens, std::size_t count, const float* table,
                             std::size_t first_token, std::size_t table_rows, std::size_t channels);
// ACCUMULATES dout[i, :] into the row of tokens[i] when it is among the table's rows.
void embedding_range_backward(float* dtable, const float* dout, const int* tokens,
                              std::size_t count, std::size_t first_token, std::size_t table_rows,
                              std::size_t channels);
// Learned positions of `rows` consecutive token rows starting at row `first_row` of a [B, T]
// batch (row r is position r mod T): out[i, :] += wpe[(first_row + i) mod T, :].
void position_forward(float* out, const float* wpe, std::size_t first_row, std::size_t rows,
                      std::size_t seq_len, std::size_t channels);
// ACCUMULATES dout[i, :] into dwpe[(first_row + i) mod T, :].
void position_backward(float* dwpe, const float* dout, std::size_t first_row, std::size_t rows,
                       std::size_t seq_len, std::size_t channels);

}  // namespace zerolens::kernels
