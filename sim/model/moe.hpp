#pragma once
// The blocks of mixture-of-experts and multi-head-latent-attention transformers
// (sim/model/moe.cpp), built for build_transformer: attention (grouped-query or MLA) and a dense or
// MoE MLP of the shape's kind (SwiGLU, or GPT-2's GELU MLP).
#include <string>

#include "sim/config/parallelism.hpp"
#include "sim/model/model.hpp"

namespace zerolens {

// Block `index` of a shape with `moe` or `mla` set, as one rank of `ep` holds it.
Layer mixture_block_layer(const TransformerShape& shape, int index, const ExpertParallelism& ep);

// Throws InputError(where + "." + key, why) when the MoE or MLA dimensions are invalid.
void validate_mixture(const TransformerShape& shape, const std::string& where);

}  // namespace zerolens
