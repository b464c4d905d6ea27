#include "cli/plan_options.hpp"
#include "cli/validators.hpp"

namespace zerolens::cli {
namespace {

// A device or precision flag: CLI11 checks the name, sim reads it into its enum.
template <typename Value>
CLI::Option* add_named(CLI::App& app, const std::string& flags, const std::string& where,
                       std::optional<Value>& target,
                       Value (*parse)(const std::string&, const std::string&),
                       const std::string& help, const std::vector<std::string>& names) {
  const auto read = [&target, parse, where](const std::string& text) {
    target = parse(text, where);
  };
  return app.add_option_function<std::string>(flags, read, help)
      ->transform(canonical_names(names))
      ->check(CLI::IsMember(names));
}

}  // namespace

void add_plan_options(CLI::App& app, PlanOptions& o) {
  app.add_option("-m,--model", o.model,
                 "Model: a preset (gpt2-124m ... llama3-70b, gpt2-tiny, gpt2-tiny-moe), dense:<N> "
                 "(exactly N parameters, e.g. dense:7.5e9), or a JSON file (Hugging Face "
                 "config.json or a layer list)")
      ->capture_default_str();
  app.add_option("--hf-config", o.hf_config, "Hugging Face config.json (GPT-2, LLaMA, Mistral); overrides --model");
  app.add_option("-c,--deepspeed-config", o.deepspeed_config,
                 "DeepSpeed config JSON (or ColossalAI zero fields as JSON); flags override it");
  app.add_option("--cluster", o.cluster,
                 "Cluster preset (dgx-2, dgx-a100-40gb, dgx-a100-80gb, dgx-h100, h100-x1) or JSON file")
      ->capture_default_str();
  app.add_option("-g,--gpus", o.gpus,
                 "GPUs (ranks) of the job: data x tensor x pipeline parallel; default: all GPUs of "
                 "the cluster preset")
      ->check(integer_in(1, 10'000'000));
  app.add_option("--dp", o.dp, "Data-parallel ranks (default: --gpus / (--tp x --pp))")
      ->check(integer_in(1, 10'000'000));
  app.add_option("--tp", o.tensor_parallel,
                 "Tensor-parallel ranks (Megatron's split of every block over a node's GPUs; "
                 "tensor_parallel.autotp_size); ZeRO runs over the data-parallel group of each")
      ->check(integer_in(1, 4096));
  app.add_option("--sp", o.sequence_parallel,
                 "Sequence parallelism with --tp (true|false): norms, dropout and the residual "
                 "stream split along the sequence (Korthikanti et al. 2022)");
  app.add_option("--pp", o.pipeline_parallel,
                 "Pipeline stages (pipeline.stages): the layers split into stages, the step's "
                 "micro-batches (--grad-accum) flowing through them; ZeRO stage 0 or 1")
      ->check(integer_in(1, 4096));
  app.add_option("--virtual-stages", o.virtual_stages,
                 "Model chunks per pipeline stage (interleaved 1F1B; implies --pipeline-schedule "
                 "interleaved)")
      ->check(integer_in(1, 1024));
  add_named(app, "--pipeline-schedule", "--pipeline-schedule", o.pipeline_schedule,
            parse_pipeline_schedule,
            "Pipeline schedule: 1f1b (default; DeepSpeed's and Megatron's), gpipe, interleaved",
            {"gpipe", "1f1b", "interleaved"});
  app.add_option("--ep", o.expert_parallel,
                 "Expert parallelism of a mixture-of-experts model (DeepSpeed MoE's ep_size; "
                 "moe.ep_size): each MoE layer's experts split over this many data-parallel "
                 "ranks, tokens exchanged by all-to-all; ZeRO stage 0-2")
      ->check(integer_in(1, 4096));
  app.add_option("--capacity-factor", o.capacity_factor,
                 "With --ep: tokens an expert takes, as a factor of its even share x top-k "
                 "(DeepSpeed's capacity_factor; moe.capacity_factor; default 1)")
      ->check(CLI::Range(1e-6, 1024.0));
  app.add_option("--min-capacity", o.min_capacity,
                 "With --ep: the least tokens an expert's buffer holds (DeepSpeed's min_capacity; "
                 "moe.min_capacity; default 4)")
      ->check(integer_in(0, 1 << 30));
  app.add_option(
         "--shard-group", o.shard_group,
         "Hybrid sharding at stage 3: partition over groups of this many data-parallel "
         "ranks and replicate across them (DeepSpeed MiCS: zero_optimization.mics_shard_size; "
         "FSDP: HSDP's shard group)")
      ->check(integer_in(1, 1 << 24));
  app.add_option(
         "--hpz", o.hpz_partition_size,
         "ZeRO++ hpZ at stage 3: a secondary copy of the parameters partitioned over groups "
         "of this many ranks (a node's), which backward gathers within the group "
         "(zero_optimization.zero_hpz_partition_size; 1: off)")
      ->check(integer_in(1, 1 << 24));
  app.add_option(
      "--quantized-weights", o.quantized_weights,
      "ZeRO++ qwZ at stage 3 (true|false): parameter all-gathers in block-quantized int8 "
      "(zero_optimization.zero_quantized_weights)");
  app.add_option(
      "--quantized-gradients", o.quantized_gradients,
      "ZeRO++ qgZ at stage 3 (true|false): 2-D gradients reduced by an int4 all-to-all "
      "within each node, then across nodes (zero_optimization.zero_quantized_gradients)");
  app.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (default: the cluster's)")
      ->check(integer_in(1, 1024));
  app.add_option("--attention", o.attention, "Attention implementation for activation memory: eager|flash")
      ->check(CLI::IsMember({"eager", "flash"}));
  app.add_option("--dropout", o.dropout,
                 "Dropout probability of a transformer (0: no dropout masks or outputs kept; "
                 "default: the model's)")
      ->check(CLI::Range(0.0, 0.999));
  auto* lora = "LoRA fine-tuning";
  app.add_option("--lora-rank", o.lora_rank,
                 "LoRA: freeze the model and train adapters of this rank on --lora-targets (no "
                 "gradients, master copy or optimizer states for the frozen base)")
      ->check(integer_in(1, 65536))
      ->group(lora);
  app.add_option("--lora-targets", o.lora_targets,
                 "LoRA: the modules adapted, PEFT's names as a comma list (q_proj,v_proj; c_attn "
                 "for GPT-2; all-linear); default PEFT's for the family")
      ->group(lora);
  app.add_option("--quantize-base", o.quantize_base,
                 "QLoRA: store the frozen base's linear weights as 4-bit NF4 with bitsandbytes' "
                 "double quantization (nf4), without it (nf4-no-double-quant), or not (none)")
      ->check(CLI::IsMember({"none", "nf4", "nf4-no-double-quant"}))
      ->group(lora);
  app.add_option("--lora-dropout", o.lora_dropout,
                 "LoRA: PEFT's lora_dropout (default 0; above 0 each adapter keeps its dropout's "
                 "mask and output)")
      ->check(CLI::Range(0.0, 0.999))
      ->group(lora);
  auto* zero = "DeepSpeed fields";
  app.add_option("-s,--stage", o.stage, "zero_optimization.stage (0 = plain data parallelism)")
      ->check(integer_in(0, 3))
      ->group(zero);
  add_named(app, "--offload-optimizer", "--offload-optimizer", o.offload_optimizer,
            parse_offload_device, "zero_optimization.offload_optimizer.device: none|cpu|nvme",
            {"none", "cpu", "nvme"})
      ->group(zero);
  add_named(app, "--offload-param", "--offload-param", o.offload_param, parse_offload_device,
            "zero_optimization.offload_param.device: none|cpu|nvme (stage 3)",
            {"none", "cpu", "nvme"})
      ->group(zero);
  app.add_option("--nvme-path", o.nvme_path, "nvme_path of both offload blocks")->group(zero);
  add_named(
      app, "--framework", "--framework", o.framework, parse_framework,
      "Framework whose allocations are planned: deepspeed (default), fsdp2 (fully_shard), fsdp1 "
      "(FullyShardedDataParallel), colossalai (ShardedModelV2 of ColossalAI 0.1.x, fp16); FSDP "
      "and ColossalAI plan stage 3 (FULL_SHARD)",
      {"deepspeed", "fsdp2", "fsdp1", "colossalai"})
      ->group(zero);
  add_named(app, "--shard-strategy", "--shard-strategy", o.shard_strategy, parse_shard_strategy,
            "ColossalAI: tensor (TensorShardStrategy: one all-gather per tensor) or bucket-tensor "
            "(BucketTensorShardStrategy: one per module, its shards flattened)",
            {"tensor", "bucket-tensor"})
      ->group(zero);
  add_named(app, "--placement", "--placement", o.placement, parse_placement_policy,
            "ColossalAI's tensor_placement_policy: cuda (default), cpu (parameter shards, "
            "gradients and optimizer states on the host) or auto (Gemini moves parameter shards "
            "from the warm-up step's memory statistics; gradients and optimizer on the host)",
            {"cuda", "cpu", "auto"})
      ->group(zero);
  app.add_option("--reuse-fp16-shard", o.reuse_fp16_shard,
                 "ColossalAI (true|false): the fp16 gradient shard replaces the parameter shard "
                 "until the step, no fp32 gradient copy; refused with gradient accumulation")
      ->group(zero);
  app.add_option("--delayed-param-update", o.delayed_param_update,
                 "ZeRO-Offload's delayed parameter update (true|false; "
                 "zero_optimization.delay_param_update, stages 1-2 with --offload-optimizer cpu): "
                 "the CPU optimizer step of step n beside the forward and backward of step n+1")
      ->group(zero);
  app.add_option("--dpu-warmup", o.delayed_param_update_warmup,
                 "Steps before the delayed parameter update starts "
                 "(zero_optimization.delay_param_update_warmup; default 20, the DPU fork's)")
      ->check(integer_in(0, 1 << 30))
      ->group(zero);
  app.add_option(
         "--reshard-after-forward", o.reshard_after_forward,
         "FSDP: free a unit's gathered parameters after its forward (true; false = SHARD_GRAD_OP)")
      ->group(zero);
  add_named(app, "--reduce-dtype", "--reduce-dtype", o.reduce_dtype, parse_precision,
            "FSDP: MixedPrecisionPolicy.reduce_dtype fp32|bf16|fp16 (default: the parameter dtype)",
            {"fp32", "fp16", "bf16"})
      ->group(zero);
  app.add_option("--pin-memory", o.pin_memory, "pin_memory of both offload blocks (true|false)")->group(zero);
  app.add_option("-b,--micro-batch", o.micro_batch,
                 "train_micro_batch_size_per_gpu (keeps gradient_accumulation_steps; "
                 "train_batch_size follows)")
      ->check(positive_integer())
      ->group(zero);
  app.add_option("--grad-accum", o.grad_accum, "gradient_accumulation_steps")
      ->check(positive_integer())
      ->group(zero);
  app.add_option("--train-batch", o.train_batch,
                 "train_batch_size (= micro x accumulation x ranks)")
      ->check(positive_integer())
      ->group(zero);
  app.add_option("--seq-len", o.seq_len,
                 "Sequence length (default: the model's maximum); an encoder-decoder's source")
      ->check(positive_integer())
      ->group(zero);
  app.add_option("--target-seq-len", o.target_seq_len,
                 "An encoder-decoder's (T5's) target sequence, its decoder's length (default: "
                 "--seq-len)")
      ->check(integer_in(1, std::int64_t(1) << 24))
      ->group(zero);
  add_named(app, "-p,--precision", "--precision", o.precision, parse_precision,
            "fp32|fp16|bf16 (sets the fp16/bf16 blocks; DeepSpeed's default is fp32)",
            {"fp32", "fp16", "bf16"})
      ->group(zero);
  app.add_option("--optimizer", o.optimizer, "optimizer.type: adam|adamw|sgd")->group(zero);
  add_named(app, "--optimizer-kernel", "--optimizer-kernel", o.optimizer_kernel,
            parse_optimizer_kernel,
            "Adam's GPU kernel: fused (DeepSpeed's FusedAdam, torch fused=True), foreach "
            "(torch.optim's default since 2.0: a sqrt(v) temporary of every stepped element) or "
            "for-loop (foreach=False, PyTorch 1.x's default: two temporaries of one tensor); "
            "default fused under DeepSpeed (optimizer.params.torch_adam=true: foreach), foreach "
            "under FSDP",
            {"fused", "foreach", "for-loop"})
      ->group(zero);
  app.add_option("--momentum", o.momentum, "optimizer.params.momentum (SGD)")->group(zero);
  app.add_option("--activation-checkpointing", o.activation_checkpointing,
                 "Checkpoint every transformer block (true|false)")->group(zero);
  app.add_option("--cpu-checkpointing", o.cpu_checkpointing, "activation_checkpointing.cpu_checkpointing")->group(zero);
  app.add_option("--partition-activations", o.partition_activations,
                 "activation_checkpointing.partition_activations")->group(zero);
  app.add_option("--reduce-bucket-size", o.reduce_bucket_size, "zero_optimization.reduce_bucket_size (elements)")->group(zero);
  app.add_option("--allgather-bucket-size", o.allgather_bucket_size, "zero_optimization.allgather_bucket_size (elements)")->group(zero);
  app.add_option("--prefetch-bucket-size", o.prefetch_bucket_size, "stage3_prefetch_bucket_size (elements)")->group(zero);
  app.add_option("--param-persistence-threshold", o.param_persistence_threshold,
                 "stage3_param_persistence_threshold (elements)")->group(zero);
  app.add_option("--max-live-parameters", o.max_live_parameters, "stage3_max_live_parameters (elements)")->group(zero);
  app.add_option("--max-reuse-distance", o.max_reuse_distance, "stage3_max_reuse_distance (elements)")->group(zero);
  app.add_option("--sub-group-size", o.sub_group_size, "zero_optimization.sub_group_size (elements)")->group(zero);
  app.add_option("--overlap-comm", o.overlap_comm, "zero_optimization.overlap_comm (true|false)")->group(zero);
  app.add_option("--contiguous-gradients", o.contiguous_gradients, "zero_optimization.contiguous_gradients")->group(zero);
  app.add_option("--reduce-scatter", o.reduce_scatter, "zero_optimization.reduce_scatter")->group(zero);
  app.add_option(
         "--reduce-buffers-at", o.reduce_buffers_at,
         "when stages 1-2 allocate the reduce buffers: first-hook (DeepSpeed 0.19.8, default) or "
         "backward (older DeepSpeed, allocated as backward() starts)")
      ->check(CLI::IsMember({"first-hook", "backward"}))
      ->group(zero);
  app.add_option("--set", o.set, "Any DeepSpeed key: --set zero_optimization.round_robin_gradients=true (repeatable)")
      ->group(zero);
  auto* accounting = "Accounting";
  app.add_flag("--model-states-only", o.model_states_only,
               "Count model states only (the ZeRO paper's accounting): no activations, buffers or overhead")
      ->group(accounting);
  app.add_option("--cuda-context", o.cuda_context_gib, "CUDA context per GPU in GiB (default 0.5)")->group(accounting);
  app.add_option("--workspace", o.workspace_gib, "cuBLAS/NCCL workspaces per GPU in GiB (default 0.25)")->group(accounting);
  app.add_option("--allocator", o.allocator,
                 "GPU allocator, for the reserved bytes: pytorch-caching (PyTorch's caching "
                 "allocator, simulated; the "
                 "default), pytorch-expandable (with expandable_segments:True), flat (reserved = "
                 "allocated x (1 + "
                 "--fragmentation))")
      ->check(CLI::IsMember({"pytorch-caching", "pytorch-expandable", "flat"}))
      ->group(accounting);
  app.add_option("--fragmentation", o.fragmentation,
                 "Flat allocator allowance, fraction of the peak allocated bytes (implies "
                 "--allocator flat)")
      ->group(accounting);
}

}  // namespace zerolens::cli
