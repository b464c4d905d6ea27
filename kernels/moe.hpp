#pragma once
// Mixture-of-experts routing on float32 rows, as DeepSpeed's top-k gate and MOELayer run it
// (deepspeed/moe/sharded_moe.py): a softmax over the router's logits, each token's top-k experts
// with their gates renormalised over the k, an [experts, capacity, channels] dispatch buffer
// filled in token order (tokens past an expert's capacity are dropped: "position" policy), and
// the combine that sums each token's expert outputs weighted by its gates. Forward kernels
// overwrite their outputs; backward kernels ACCUMULATE (+=) as the other kernels do.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zerolens::kernels {

// The routes of `tokens` tokens: for token t and its j-th choice, the expert, the slot in that
// expert's buffer (-1: dropped, past the capacity), and the normalised gate.
struct MoeRoutes {
  std::size_t tokens = 0, top_k = 0, experts = 0, capacity = 0;
  std::vector<std::int32_t> expert;  // [tokens, top_k]
  std::vector<std::int32_t> slot;    // [tokens, top_k]
  std::vector<float> gate;           // [tokens, top_k]
  std::vector<float> probs;          // [tokens, experts]: the softmax, kept for backward
};

// probs = softmax(logits [tokens, experts]); each token's top_k experts (ties: the lower index),
// their gates p / sum of the k p; slots in token order up to `capacity` per expert.
MoeRoutes moe_route(const float* logits, std::size_t tokens, std::size_t experts, std::size_t top_k,
                    std::size_t capacity);

// buffer[experts, capacity, channels] = the routed tokens' rows of inp[tokens, channels], zeros
// in empty slots (overwritten).
void moe_dispatch(float* buffer, const float* inp, const MoeRoutes& routes, std::size_t channels);
// out[tokens, channels] = sum over a token's kept routes of gate x buffer[expert, slot]
// (overwritten).
void moe_combine(float* out, const float* buffer, const MoeRoutes& routes, std::size_t channels);

// Gradients of moe_combine given dout: dbuffer[expert, slot] += gate x dout[token] (dbuffer
// zeroed by the caller), dgate[token, j] += dout[token] . buffer[expert, slot].
void moe_combine_backward(float* dbuffer, float* dgate, const float* dout, const float* buffer,
                          const MoeRoutes& routes, std::size_t channels);
// Gradient of moe_dispatch: dinp[token] += dbuffer[expert, slot] for each kept route.
void moe_dispatch_backward(float* dinp, const float* dbuffer, const MoeRoutes& routes,
                           std::size_t channels);
// Gradient of the gates through their normalisation and the softmax: dlogits[tokens, experts] +=
// d(logits) given dgate[tokens, top_k].
void moe_route_backward(float* dlogits, const float* dgate, const MoeRoutes& routes);

}  // namespace zerolens::kernels
