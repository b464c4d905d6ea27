#pragma once
// The CPU kernels the executor trains GPT-2 with (namespace zerolens::kernels). Activations are
// row-major float32: B = batch, T = sequence, C = channels, V = vocabulary, NH = heads.
// Convention: forward kernels overwrite their outputs; backward kernels ACCUMULATE (+=) into every
// gradient they write, so the caller zeroes gradient buffers once per step (or micro-batch).
#include "kernels/activation.hpp"
#include "kernels/attention.hpp"
#include "kernels/embedding.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/loss.hpp"
#include "kernels/matmul.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/precision.hpp"
