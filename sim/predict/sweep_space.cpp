// The sweep's space: the layouts of the job's GPUs and the points of each that DeepSpeed accepts.
#include <algorithm>
#include <set>
#include <sstream>

#include "sim/core/error.hpp"
#include "sim/predict/sweep.hpp"

namespace zerolens {
namespace {

bool has_nvme(const Cluster& cluster) {
  return cluster.node.nvme_capacity_bytes > 0 && cluster.node.nvme_read_bandwidth > 0 &&
         cluster.node.nvme_write_bandwidth > 0;
}

bool contains(const std::vector<OffloadDevice>& devices, OffloadDevice device) {
  return std::find(devices.begin(), devices.end(), device) != devices.end();
}

void add_note(std::vector<std::string>& notes, const std::string& note) {
  if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
}

// Powers of two up to the batch per rank that divide it.
std::vector<std::int64_t> default_micro_batches(std::int64_t batch_per_rank) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t size = 1; size <= batch_per_rank; size *= 2) {
    if (batch_per_rank % size == 0) sizes.push_back(size);
  }
  return sizes;
}

std::vector<std::int64_t> micro_batches_of(const SweepSpace& space, std::int64_t batch_per_rank,
                                           std::vector<std::string>& notes) {
  if (space.micro_batches.empty()) return default_micro_batches(batch_per_rank);
  std::vector<std::int64_t> kept;
  for (const auto size :
       std::set<std::int64_t>(space.micro_batches.begin(), space.micro_batches.end())) {
    if (size >= 1 && batch_per_rank % size == 0) {
      kept.push_back(size);
    } else {
      add_note(notes, "micro-batch " + std::to_string(size) +
                          " skipped: it does not divide the batch per rank (" +
                          std::to_string(batch_per_rank) + ")");
    }
  }
  return kept;
}

// Why DeepSpeed (or this cluster) refuses a stage/offload combination; empty when accepted.
std::string refusal(int stage, OffloadDevice optimizer, OffloadDevice param, bool nvme_available,
                    bool fsdp, bool pipeline, bool expert_parallel) {
  const ZeroStage zero{stage};
  if (pipeline && stage > 1) return "DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only";
  if (expert_parallel && (stage > 2 || fsdp)) return "DeepSpeed's MoE layers run at stage 0-2";
  if (fsdp && stage != 3) return "FSDP shards parameters (stage 3)";
  if (fsdp && optimizer != param)
    return "FSDP's CPUOffloadPolicy offloads parameters and optimizer together";
  if (fsdp && optimizer == OffloadDevice::Nvme) return "FSDP offloads to the CPU only";
  if (param != OffloadDevice::None && !zero.offload_allowed(OffloadKind::Param)) {
    return "parameter offload needs stage 3";
  }
  if (optimizer != OffloadDevice::None && !zero.offload_allowed(OffloadKind::Optimizer)) {
    return "optimizer offload needs stage 1, 2 or 3";
  }
  if (optimizer == OffloadDevice::Nvme && !zero.swaps_optimizer_to_nvme()) {
    return "NVMe optimizer offload is a stage-3 feature";
  }
  if ((optimizer == OffloadDevice::Nvme || param == OffloadDevice::Nvme) && !nvme_available) {
    return "the cluster has no NVMe";
  }
  return {};
}

template <typename T>
std::vector<T> or_base(const std::vector<T>& listed, T base) {
  if (listed.empty()) return {base};
  std::vector<T> unique;
  for (const T& value : listed)
    if (std::find(unique.begin(), unique.end(), value) == unique.end()) unique.push_back(value);
  return unique;
}

int world_of(const PlanRequest& base) {
  return base.dp_size * base.config.tensor_parallel.size * base.config.pipeline.size;
}

// Every layout of the lists (SP only with TP, virtual stages only with PP, tp x pp dividing the
// GPUs: the others are counted in a note); `families` gets each, with the reason when it cannot
// split the global batch.
std::vector<ParallelLayout> layouts_of(const PlanRequest& base, const SweepSpace& space,
                                       std::int64_t train_batch, std::vector<SweepFamily>& families,
                                       std::vector<std::string>& notes) {
  const int world = world_of(base);
  std::vector<ParallelLayout> layouts;
  int not_dividing = 0, experts_not_dividing = 0;
  for (const int ep : or_base(space.expert_parallel, base.config.expert_parallel.size))
    for (const int tp : or_base(space.tensor_parallel, base.config.tensor_parallel.size))
      for (const bool sp :
           or_base(space.sequence_parallel, base.config.tensor_parallel.sequence_parallel))
        for (const int pp : or_base(space.pipeline_parallel, base.config.pipeline.size))
          for (const int virtual_stages :
               or_base(space.virtual_stages, base.config.pipeline.virtual_stages)) {
            if ((sp && tp == 1) || (virtual_stages > 1 && pp == 1)) continue;
            if (tp < 1 || pp < 1 || virtual_stages < 1)
              throw InputError("sweep",
                               "tensor, pipeline and virtual stage sizes must be at least 1");
            const std::int64_t model_parallel = std::int64_t(tp) * pp;
            if (world % model_parallel != 0) {
              ++not_dividing;
              continue;
            }
            SweepFamily family{
                .layout = {tp, pp, virtual_stages, sp, int(world / model_parallel), ep}};
            if (ep < 1 || family.layout.data % ep != 0) {
              ++experts_not_dividing;
              continue;
            }
            if (train_batch % family.layout.data != 0) {
              family.verdict = "refused: the global batch " + std::to_string(train_batch) +
                               " is not a multiple of the data-parallel size " +
                               std::to_string(family.layout.data);
            } else {
              layouts.push_back(family.layout);
            }
            families.push_back(family);
          }
  if (not_dividing > 0)
    add_note(notes, std::to_string(not_dividing) + " layout" + (not_dividing > 1 ? "s" : "") +
                        " skipped: tensor x pipeline parallel does not divide the " +
                        std::to_string(world) + " GPUs");
  if (experts_not_dividing > 0)
    add_note(notes, std::to_string(experts_not_dividing) + " layout" +
                        (experts_not_dividing > 1 ? "s" : "") +
                        " skipped: the expert-parallel size does not divide the data-parallel "
                        "ranks");
  return layouts;
}

bool zeropp_accepted(std::optional<ZeroPlusPlus> zeropp, int stage, const ParallelLayout& layout,
                     std::vector<std::string>& notes) {
  if (!zeropp || *zeropp == ZeroPlusPlus::Off) return true;
  if (stage == 3 && layout.pipeline == 1 && (layout.tensor == 1 || *zeropp == ZeroPlusPlus::Qwz))
    return true;
  add_note(notes,
           "ZeRO++ variants are swept at stage 3 without PP (DeepSpeed's pipeline engine runs "
           "stage 0 or 1), and only qwZ with TP (DeepSpeed groups hpZ and qgZ over the world's "
           "ranks)");
  return false;
}

// The points of one layout, micro-batch innermost (the pruning walks each chain upwards).
void add_layout_points(const PlanRequest& base, const SweepSpace& space,
                       const ParallelLayout& layout, std::int64_t train_batch,
                       std::vector<SweepPoint>& points, std::vector<std::string>& notes) {
  const std::int64_t batch_per_rank = train_batch / layout.data;
  const auto micro_batches = micro_batches_of(space, batch_per_rank, notes);
  const bool nvme = has_nvme(base.cluster);
  std::vector<std::optional<ZeroPlusPlus>> zeropp_variants;
  for (const auto variant : space.zeropp) zeropp_variants.push_back(variant);
  for (const auto zeropp : or_base(zeropp_variants, std::optional<ZeroPlusPlus>{}))
    for (const int stage : std::set<int>(space.stages.begin(), space.stages.end()))
      for (const auto optimizer : space.optimizer_devices)
        for (const auto param : space.param_devices) {
          if (!refusal(stage, optimizer, param, nvme, base.config.is_fsdp(), layout.pipeline > 1,
                       layout.expert > 1)
                   .empty())
            continue;
          if (!zeropp_accepted(zeropp, stage, layout, notes)) continue;
          for (const bool checkpointing : space.checkpointing)
            for (const auto micro : micro_batches)
              points.push_back({layout, zeropp, stage, optimizer, param, micro,
                                batch_per_rank / micro, checkpointing});
        }
}

}  // namespace

const char* to_string(ZeroPlusPlus variant) {
  switch (variant) {
    case ZeroPlusPlus::Off:
      return "off";
    case ZeroPlusPlus::Hpz:
      return "hpz";
    case ZeroPlusPlus::Qwz:
      return "qwz";
    case ZeroPlusPlus::Qgz:
      return "qgz";
    case ZeroPlusPlus::All:
      return "all";
  }
  return "?";
}

ZeroPlusPlus parse_zeropp(const std::string& text, const std::string& where) {
  for (const auto variant : {ZeroPlusPlus::Off, ZeroPlusPlus::Hpz, ZeroPlusPlus::Qwz,
                             ZeroPlusPlus::Qgz, ZeroPlusPlus::All})
    if (text == to_string(variant)) return variant;
  throw InputError(where, "'" + text + "' is not a ZeRO++ variant (off, hpz, qwz, qgz or all)");
}

std::string ParallelLayout::label() const {
  std::ostringstream text;
  if (tensor > 1) text << "tp " << tensor << (sequence_parallel ? " sp" : "") << " x ";
  if (pipeline > 1)
    text << "pp " << pipeline << (virtual_stages > 1 ? " v " + std::to_string(virtual_stages) : "")
         << " x ";
  text << "dp " << data;
  if (expert > 1) text << " ep " << expert;
  return text.str();
}

std::string SweepPoint::label() const {
  std::ostringstream text;
  if (layout.tensor > 1 || layout.pipeline > 1 || layout.expert > 1)
    text << '[' << layout.label() << "] ";
  if (zeropp && *zeropp != ZeroPlusPlus::Off) text << "zero++ " << to_string(*zeropp) << ' ';
  text << ZeroStage{stage}.name() << " opt:" << to_string(optimizer)
       << " param:" << to_string(param) << " mb " << micro_batch << " x ga " << grad_accumulation
       << (checkpointing ? " ckpt" : "");
  return text.str();
}

void add_parallel_search(const PlanRequest& base, SweepSpace& space) {
  const int world = world_of(base);
  const auto& shape = base.model.shape;
  if (space.tensor_parallel.empty()) {
    // (Tensor parallelism of MoE and latent-attention layers is not modelled.)
    const bool splits = shape && !shape->moe && !shape->mla;
    const int limit = splits ? std::min(base.cluster.node.gpus_per_node, world) : 1;
    for (int tp = 1; tp <= limit; tp *= 2)
      if (world % tp == 0) space.tensor_parallel.push_back(tp);
  }
  if (space.pipeline_parallel.empty()) {
    const int blocks = shape ? shape->layers : 1;
    for (int pp = 1; pp <= std::min(blocks, world); ++pp)
      if (blocks % pp == 0 && world % pp == 0) space.pipeline_parallel.push_back(pp);
  }
  if (space.virtual_stages.empty()) space.virtual_stages = {1, 2};
  if (space.sequence_parallel.empty()) space.sequence_parallel = {false, true};
  // A MoE model's expert-parallel sizes: every divisor of its experts (DeepSpeed: num_experts %
  // ep_size == 0) up to the GPUs; each layout keeps those dividing its data-parallel ranks.
  if (space.expert_parallel.empty() && shape && shape->moe) {
    for (int ep = 1; ep <= std::min(shape->moe->experts, world); ++ep)
      if (shape->moe->experts % ep == 0) space.expert_parallel.push_back(ep);
  }
  // ZeRO++ settings the base gives (flags, a DeepSpeed config) stay as they are.
  if (space.zeropp.empty() && !base.config.zero.zeropp())
    space.zeropp = {ZeroPlusPlus::Off, ZeroPlusPlus::All};
}

std::int64_t sweep_train_batch(const PlanRequest& base) {
  const auto& given = base.config.batch.train_batch_size;
  if (given) {
    if (*given < 1)
      throw InputError("train_batch_size", "must be at least 1, not " + std::to_string(*given));
    return *given;
  }
  return resolve_batch(base.config.batch, base.dp_size).train_batch_size;
}

SweepEnumeration enumerate_sweep(const PlanRequest& base, const SweepSpace& space,
                                 std::vector<std::string>& notes) {
  // The sweep varies DeepSpeed's stages and offload blocks; ColossalAI's placements are compared
  // with `plan --compare`.
  if (base.config.is_colossalai()) {
    throw InputError("--framework",
                     "the sweep varies DeepSpeed's and FSDP's stages and offloads; "
                     "compare ColossalAI's placements with `zerolens plan --compare`");
  }
  const std::int64_t train_batch = sweep_train_batch(base);
  const bool nvme_available = has_nvme(base.cluster);
  if (!nvme_available && (contains(space.optimizer_devices, OffloadDevice::Nvme) ||
                          contains(space.param_devices, OffloadDevice::Nvme))) {
    notes.push_back("NVMe offload skipped: cluster '" + base.cluster.name +
                    "' has no NVMe (capacity and bandwidth)");
  }
  SweepEnumeration enumeration;
  for (const auto& layout : layouts_of(base, space, train_batch, enumeration.families, notes)) {
    const std::size_t before = enumeration.points.size();
    add_layout_points(base, space, layout, train_batch, enumeration.points, notes);
    for (auto& family : enumeration.families)
      if (family.layout == layout)
        family.enumerated = std::int64_t(enumeration.points.size() - before);
  }
  if (enumeration.points.empty()) {
    for (const auto& family : enumeration.families)
      if (!family.verdict.empty()) add_note(notes, family.layout.label() + ": " + family.verdict);
    throw InputError("sweep", "no configuration left to evaluate (see the notes)");
  }
  return enumeration;
}

}  // namespace zerolens
