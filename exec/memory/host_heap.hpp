#pragma once
// The executor's host heap keeps the memory its buffers free, as a GPU's caching allocator keeps
// freed blocks (PyTorch's CUDACachingAllocator, which the CPU backend's buffers stand in for).
//
// Why: glibc's malloc serves a block of 128 KiB or more with mmap and returns it with munmap on
// free, and trims the heap's top past 128 KiB; every step of the CPU backend then faults its
// activations' pages in again. gpt2-tiny (bf16, DP, one rank) took about 1,060 page faults per
// step, a fifth of its time in the kernel, at a cost a shared virtual machine varies from minute to
// minute (docs/executor.md, "The host heap"). With the heap kept: 23 faults per step.
namespace zerolens::exec {

// Serves every allocation from the heap (no mmap) and never trims it, for the rest of the
// process. Idempotent; call before the buffers of a run or calibration are allocated. Returns
// false where the C library refused (the step then keeps paying the faults).
bool keep_host_heap();

}  // namespace zerolens::exec
