#pragma once
// The GPU kernels (namespace zerolens::kernels::cuda): the CUDA versions of the CPU kernels of
// kernels/cpu.hpp with the same layouts and the same forward-overwrites / backward-accumulates
// convention. Every function takes device pointers and a cudaStream_t, is asynchronous on that
// stream, and throws std::runtime_error naming the CUDA or cuBLAS call that failed.
#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/blas.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/layernorm.hpp"
#include "kernels/cuda/loss.hpp"
#include "kernels/cuda/matmul.hpp"
#include "kernels/cuda/optimizer.hpp"
#include "kernels/cuda/precision.hpp"
#include "kernels/cuda/runtime.hpp"
